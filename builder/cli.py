"""`redvox`: the command line. Each command group lives beside the code it drives
and is imported only when used, so `redvox --help` stays fast."""

from __future__ import annotations

import importlib
import json

import click

# command name -> "module:attribute" of its click command or group
COMMANDS: dict[str, str] = {
    "sources": "redvox.sources.cli:sources",
    "build": "redvox.builder.build_cli:build",
    "variants": "redvox.builder.build_cli:variants",
    "evaluate": "redvox.release.evaluation.evaluate:cli",
    "release": "redvox.release.hub.cli:release",
    "serve": "redvox.release.serve.cli:serve",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS:
            module, attr = COMMANDS[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        """The one place user errors become a message: a UserError (or an OS error a
        user caused, such as a read-only or full output folder) prints one line and
        exits 1; anything else is a bug and keeps its traceback."""
        from redvox.schemas.errors import UserError, os_error_message

        try:
            return super().invoke(ctx)
        except UserError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            message = os_error_message(exc)
            if message is None:
                raise
            raise click.ClickException(message) from None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="redvox")
def main() -> None:
    """Build, check and publish RedVox, a multilingual speech safety and fairness benchmark.

    Without --config, commands read the embedded synthetic demo corpus.
    """


@main.command()
@click.argument("record", required=False)
def schema(record: str | None) -> None:
    """Print the JSON Schema of each record (or of RECORD, e.g. Entry)."""
    from redvox.schemas import SCHEMA_RECORDS

    if record is not None and record not in SCHEMA_RECORDS:
        raise click.BadParameter(
            f"unknown record {record!r}; choose from {', '.join(SCHEMA_RECORDS)}"
        )
    chosen = {record: SCHEMA_RECORDS[record]} if record else SCHEMA_RECORDS
    schemas = {
        name: model.model_json_schema(mode="serialization") for name, model in chosen.items()
    }
    click.echo(json.dumps(schemas if record is None else schemas[record], indent=2))

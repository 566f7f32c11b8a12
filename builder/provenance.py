"""Which inputs a build read, recorded beside its sets so that the release steps
(represent, stage, verify, push) use the same ones.

`OUT/<version>/build-inputs.json` holds the input config the build used (absolute
paths: a private file, never staged) and the sha256 of each input file. A release
step given no `--config` reads the inputs from there; given one, it refuses it when
its inputs differ from the build's, since the consent check of a release must read
the registries of the collection that was built, not another one (the demo's, say).
The consent registry itself may have changed since the build: verify re-reads it
on purpose, so that a withdrawal recorded after the build stops the release.
"""

from __future__ import annotations

import json
from pathlib import Path

from redvox.schemas import InputConfig, UserError
from redvox.sources.inputs import input_hashes

from .write import atomic_write_bytes

BUILD_INPUTS = "build-inputs.json"
# May differ between the build and a later release step (see the module docstring).
MAY_CHANGE = ("consent",)


class InputsMismatchError(UserError):
    """A release step was pointed at other inputs than its build read."""


def record_inputs(
    version_dir: Path, config: InputConfig, hashes: dict[str, str], pending=None
) -> None:
    """Write BUILD_INPUTS; with `pending` (write.PendingFiles) it waits for the commit."""
    body = {"config": config.model_dump(mode="json"), "input_hashes": dict(sorted(hashes.items()))}
    text = json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(Path(version_dir) / BUILD_INPUTS, text.encode(), pending=pending)


def recorded_inputs(version_dir: Path) -> tuple[InputConfig, dict[str, str]] | None:
    """The build's input config and input hashes; None when the build recorded none."""
    path = Path(version_dir) / BUILD_INPUTS
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        return InputConfig.model_validate(body["config"]), body["input_hashes"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"{path}: unreadable record of the build's inputs ({exc}); rebuild"
        ) from None


def inputs_of_build(
    version_dir: Path, given: InputConfig | None, given_name: str | None, *, other_inputs: bool
) -> InputConfig:
    """The input config a release step of the build in `version_dir` must use."""
    recorded = recorded_inputs(version_dir)
    if recorded is None:
        if given is None:
            raise UserError(
                f"{version_dir}: this build records no inputs ({BUILD_INPUTS}); pass --config "
                "with the input config it was built from"
            )
        return given
    config, hashes = recorded
    if given is None:
        return config
    now = input_hashes(given)
    differ = sorted(
        name
        for name in set(hashes) | set(now)
        if name not in MAY_CHANGE and hashes.get(name) != now.get(name)
    )
    if differ and not other_inputs:
        raise InputsMismatchError(
            f"--config {given_name}: its {', '.join(differ)} differ from the inputs "
            f"{version_dir} was built from ({version_dir / BUILD_INPUTS}); leave --config out "
            "to use the build's inputs, or pass --other-inputs to use these anyway"
        )
    return given

"""Which inputs a build read, recorded beside its sets so that the release steps
(represent, stage, verify, push) are refused when theirs differ.

`OUT/<version>/build-inputs.json` holds the sha256 of each input file the build
read, and nothing else: no path. A build into an `OUT/<version>` whose record has
other inputs (other than the registries, which consent changes) is refused
(`check_same_collection`): it never replaces a build of another collection. A release step reads its inputs from the input
config it is given (`--config`, the embedded demo corpus when not given, as for
`redvox build`), so the consent registry's path always comes from an input config,
never from a file beside the build. The recorded hashes are then compared with
that config's inputs:

- the private registries (participants, consent) must be the very bytes the build
  read. A registry changed since the build (a withdrawal, a corrected answer) is
  refused with a message to rebuild, and no option overrides it: a build is
  released only with the consent it was built from;
- another input that differs (a SHADES file re-exported since, say) is refused
  unless the step is told `--other-inputs`.
"""

from __future__ import annotations

import json
from pathlib import Path

from redvox.schemas import InputConfig, UserError
from redvox.sources.inputs import input_hashes

from .write import atomic_write_bytes

BUILD_INPUTS = "build-inputs.json"
# Inputs whose change since the build always stops a release step.
REGISTRIES = ("participants", "consent")


class InputsMismatchError(UserError):
    """A release step was pointed at other inputs than its build read."""


def record_inputs(version_dir: Path, hashes: dict[str, str], pending=None) -> None:
    """Write BUILD_INPUTS; with `pending` (write.PendingFiles) it waits for the commit."""
    body = {"input_hashes": dict(sorted(hashes.items()))}
    text = json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(Path(version_dir) / BUILD_INPUTS, text.encode(), pending=pending)


def recorded_hashes(version_dir: Path) -> dict[str, str]:
    """input name -> sha256 the build recorded; UserError when there is no readable record."""
    path = Path(version_dir) / BUILD_INPUTS
    if not path.is_file():
        raise InputsMismatchError(
            f"{version_dir}: this build records no inputs ({BUILD_INPUTS}), so nothing says "
            "which consent registry it read; rebuild it (`redvox build`)"
        )
    try:
        hashes = json.loads(path.read_text(encoding="utf-8"))["input_hashes"]
        if not isinstance(hashes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()
        ):
            raise TypeError("input_hashes is not a mapping of names to sha256")
    except (ValueError, KeyError, TypeError) as exc:
        raise InputsMismatchError(
            f"{path}: unreadable record of the build's inputs ({exc}); rebuild"
        ) from None
    return hashes


def check_same_collection(version_dir: Path, config: InputConfig) -> None:
    """Refuse to build into `version_dir` when it holds a build of other inputs: one
    whose record has an input, other than the registries, with other bytes than
    `config`'s (the demo's build, when `make release RELEASE_CONFIG=mine.yaml` is given
    the demo's OUT). The registries may differ: consent changes, and a rebuild is how a
    change reaches the sets."""
    if not (Path(version_dir) / BUILD_INPUTS).is_file():
        return
    recorded = recorded_hashes(version_dir)
    now = input_hashes(config)
    differ = sorted(
        name
        for name in set(recorded) | set(now)
        if name not in REGISTRIES and recorded.get(name) != now.get(name)
    )
    if differ:
        raise InputsMismatchError(
            f"{version_dir}: holds a build of other inputs (its {', '.join(differ)} differ from "
            f"{version_dir / BUILD_INPUTS}); build into another --out (make release: OUT=DIR), "
            f"or delete {version_dir} to replace that build (OUT/.cache keeps what it computed)"
        )


def check_inputs(
    version_dir: Path, config: InputConfig, config_name: str, *, other_inputs: bool
) -> None:
    """Refuse `config` for a release step of the build in `version_dir` when its
    registries, or (without `other_inputs`) any other input, differ from the build's."""
    recorded = recorded_hashes(version_dir)
    now = input_hashes(config)
    differ = sorted(
        name for name in set(recorded) | set(now) if recorded.get(name) != now.get(name)
    )
    if differ and not other_inputs and set(differ) - set(REGISTRIES):
        # Other inputs too: most likely not the config the build was run with.
        raise InputsMismatchError(
            f"{config_name}: its {', '.join(differ)} differ from the inputs {version_dir} was "
            f"built from ({version_dir / BUILD_INPUTS}); pass --config with the input config "
            "the build used, or --other-inputs to use these anyway"
        )
    changed = [name for name in REGISTRIES if name in differ]
    if changed:
        name = changed[0]
        path = getattr(config, name)
        state = f"sha256 {now[name][:12]}" if name in now else "not found"
        raise InputsMismatchError(
            f"{config_name}: its {name} registry {path} is not the one {version_dir} was built "
            f"from ({state} now, {recorded.get(name, 'none')[:12]} recorded in {BUILD_INPUTS}); "
            "consent may have changed since the build, and a build is released only with the "
            "registries it read: rebuild this version with this input config, then represent "
            "and stage it again"
        )

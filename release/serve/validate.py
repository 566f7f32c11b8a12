"""What a researcher may put into the maintainer's serving command: a Hugging Face model
id, a revision and allow-listed serving arguments, each matched against a strict pattern
before it is formatted into the template; the command runs from shlex.split, no shell."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

# org/name as the Hub allows them: letters, digits, '-', '_', '.', no '--' or '..',
# neither part starting or ending with '-' or '.'; 96 characters each at most.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9])?"
MODEL_ID = re.compile(rf"{_PART}/{_PART}")
REVISION = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_./-]{0,126}[A-Za-z0-9])?$")
ARG_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
ARG_VALUE = re.compile(r"^[A-Za-z0-9_.:,+=][A-Za-z0-9_.:,+=-]{0,63}$")
DEFAULT_ALLOWED_ARGS = ("max-model-len", "dtype", "max-num-seqs", "gpu-memory-utilization")
PLACEHOLDERS = ("model", "revision", "port", "slot")


class RequestError(ValueError):
    """A malformed request (HTTP 400); the message says what is wrong."""


def model_id(value) -> str:
    if (
        not isinstance(value, str)
        or not MODEL_ID.fullmatch(value)
        or ".." in value
        or "--" in value
    ):
        raise RequestError(
            f"model: {value!r} is not a Hugging Face model id (org/name: letters, digits, "
            f"'-', '_', '.')"
        )
    return value


def revision(value) -> str:
    if value is None:
        return "main"
    if not isinstance(value, str) or not REVISION.fullmatch(value) or ".." in value:
        raise RequestError(f"revision: {value!r} is not a branch, tag or commit name")
    return value


def serving_args(value, allowed: tuple[str, ...]) -> dict[str, str | bool]:
    """{name: value} of allow-listed serving options; True is a bare flag."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError('serving_args: expected an object such as {"max-model-len": 4096}')
    checked: dict[str, str | bool] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not ARG_NAME.fullmatch(name) or name not in allowed:
            raise RequestError(
                f"serving_args: {name!r} is not allowed here (allowed: "
                f"{', '.join(allowed) or 'none'})"
            )
        if item is True:
            checked[name] = True
            continue
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise RequestError(f"serving_args: {name}: expected a string, number or true")
        text = str(item)
        if not ARG_VALUE.fullmatch(text):
            raise RequestError(f"serving_args: {name}: {text!r} has characters not allowed")
        checked[name] = text
    return checked


@dataclass(frozen=True)
class Template:
    """The maintainer's serving command, e.g. `vllm serve {model} --revision {revision}
    --host 127.0.0.1 --port {port} {args}`; `{args}` (a word of its own) expands to the
    allow-listed serving arguments, `{slot}` to the GPU slot number."""

    text: str

    def __post_init__(self):
        words = shlex.split(self.text)
        if not words:
            raise ValueError("the serving template is empty")
        if "{port}" not in self.text or "{model}" not in self.text:
            raise ValueError("the serving template needs {model} and {port}")
        for word in words:
            if word != "{args}":
                try:
                    word.format(**dict.fromkeys(PLACEHOLDERS, "x"))
                except (KeyError, IndexError, ValueError) as exc:
                    raise ValueError(
                        f"serving template word {word!r}: unknown placeholder ({exc}); use "
                        f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)} and {{args}}"
                    ) from None

    def resolved(self) -> Template:
        """The template with its program and its relative path words made absolute, from
        the folder the service starts in (the command itself runs elsewhere); ValueError
        naming a program that is not there."""
        words = shlex.split(self.text)
        program = words[0]
        if "/" in program:
            found = os.path.abspath(program)
            if not Path(found).is_file():
                raise ValueError(f"serving template: {program}: no such program")
        else:
            found = shutil.which(program)
            if found is None:
                raise ValueError(f"serving template: {program} not found on PATH; give its path")
        absolute = [found]
        for word in words[1:]:
            if "{" not in word and "/" in word and not word.startswith(("/", "-")):
                word = os.path.abspath(word) if Path(word).exists() else word
            absolute.append(word)
        return Template(shlex.join(absolute))

    @property
    def takes_args(self) -> bool:
        return "{args}" in shlex.split(self.text)

    def argv(self, *, model: str, revision: str, port: int, slot: int, args: dict) -> list[str]:
        values = {"model": model, "revision": revision, "port": str(port), "slot": str(slot)}
        extra: list[str] = []
        for name, item in args.items():
            extra += [f"--{name}"] if item is True else [f"--{name}", str(item)]
        argv: list[str] = []
        for word in shlex.split(self.text):
            if word == "{args}":
                argv += extra
            else:
                argv.append(word.format(**values))
        return argv

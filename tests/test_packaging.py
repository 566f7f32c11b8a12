"""The installed package holds every subpackage of the checkout: a regular (non-editable)
install takes only what pyproject.toml lists, so a folder with an `__init__.py` missing
from `packages` would be absent from a wheel while the editable install hides it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_for_the_wheel():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = setup["package-dir"]
    found = set()
    for name, folder in dirs.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert sorted(found - set(setup["packages"])) == []
    assert sorted(set(setup["packages"]) - found) == []

"""docs/ARCHITECTURE.md, "Layout": a layer imports only the layers before it. The known
arrows back are listed here, so a new one fails until the doc and this list say why."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("schemas", "sources", "noise", "builder", "release")
# (module, what it imports): the late imports of `sources check`, which reads the version
# registry and draws its noise conditions as the build would.
ARROWS_BACK = {
    ("sources/cli.py", "redvox.builder.versions"),
    ("sources/cli.py", "redvox.noise"),
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_layer_imports_a_later_one_but_the_listed_arrows():
    back = set()
    for rank, layer in enumerate(LAYERS):
        for path in sorted((ROOT / layer).rglob("*.py")):
            for name in _imports(path):
                parts = name.split(".")
                if parts[0] == "redvox" and len(parts) > 1 and parts[1] in LAYERS[rank + 1 :]:
                    back.add((path.relative_to(ROOT).as_posix(), name))
    assert back == ARROWS_BACK


def test_only_the_root_cli_imports_by_name():
    """`importlib` loads a module by name only in the root CLI's lazy dispatch (builder/cli.py
    COMMANDS), in the noise and text-source registries' scans of their own packages, and in
    the evaluator's
    optional `datasets` (third-party, for a Hub repo id)."""
    users = {
        path.relative_to(ROOT).as_posix()
        for layer in LAYERS
        for path in (ROOT / layer).rglob("*.py")
        if "import_module(" in path.read_text(encoding="utf-8")
    }
    evaluator_dataset = "release/evaluation/redvox_eval/dataset.py"
    registries = {"noise/__init__.py", "sources/texts/__init__.py"}
    assert users == {"builder/cli.py", *registries, evaluator_dataset}


def test_no_module_of_builder_imports_itself_back():
    """No import circle among the modules of builder/ (the ownership lookup reads the
    decode step's outcomes; the decode step reads only the fingerprint module), counting
    the imports made for type checking only."""
    graph = {}
    for path in sorted((ROOT / "builder").glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if parts[:2] == ["redvox", "builder"] and len(parts) > 2:
                    names.add(parts[2])
        graph[path.stem] = names & {p.stem for p in (ROOT / "builder").glob("*.py")}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
            for nxt in graph.get(start, ())
        )

    circles = sorted(module for module in graph if reaches(module, module, {module}))
    assert circles == []

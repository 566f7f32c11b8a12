"""The README's and the dataset card's commands, run as written, so that the docs
cannot drift from the code.

Every fenced `bash` and `python` block is read from the two documents (the card from a
folder staged here, as a Hub user gets it). Each bash command is either run, in a
fresh working folder with `.venv/bin` first on PATH (the README's "activate the
environment"), or listed in `EXCLUDED` with the reason it cannot run offline; a
command that is neither fails the test, so a new command in the docs must be walked
or explained. Stand-ins replace only what is outside this machine, each named in
`SUBSTITUTIONS`: the Hub repo id is the staged folder, `host:8000` is a stand-in
audio model on loopback, the judge's `https://api.openai.com/v1` a stand-in judge,
and `FILE` the demo corpus's input config.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from model_server import AudioModel, Judge

from redvox.schemas import DEMO_CONFIG, InputConfig

ROOT = Path(__file__).resolve().parent.parent
BLOCK_DONE = "<walked to the end of the block>"
BIN = Path(sys.executable).parent
DEMO = InputConfig.load(DEMO_CONFIG)

# Commands (by their first words) that need what this machine does not have.
EXCLUDED = {
    ("make", "test"): "runs this very suite",
    ("make", "release"): (
        "writes into the checkout's out/; the `redvox release ...` steps it runs are walked "
        "below, and tests/test_readme_real_inputs.py runs `make release` itself"
    ),
    ("vllm",): "needs a GPU and the model's weights: a stand-in audio model answers instead",
    ("hf", "download"): (
        "needs the Hub and an accepted gate: the folder staged here stands in for the download"
    ),
    ("pip", "install"): "installs from a package index: the walk runs in .venv, which has them",
    ("python", "evaluation/evaluate.py", "validate"): "needs your own human annotations",
    ("curl",): "talks to a running `redvox serve` at HOST with a token (tests/test_serve.py)",
}
SERVE = (
    "serves a model per job inside bubblewrap: tests/test_serve.py runs this flow with the "
    "same stand-in model and judge"
)
EXCLUDED |= {("redvox", "serve"): SERVE, ("python", "tests/model_server.py"): SERVE}
# README sections (by the start of their heading) walked by their own tests.
EXCLUDED_SECTIONS = {"Private evaluation service": SERVE}


def excluded_section(heading: str) -> str | None:
    return next((r for start, r in EXCLUDED_SECTIONS.items() if heading.startswith(start)), None)


@dataclass
class Block:
    lang: str
    code: str
    heading: str  # the `## ` section it is in


def blocks(markdown: str) -> list[Block]:
    out, heading = [], ""
    fence = r"^## ([^\n]+)$|^( *)```(bash|python)\n(.*?)^ *```"  # in a list item too
    for match in re.finditer(fence, markdown, re.M | re.S):
        if match.group(1):
            heading = match.group(1).strip()
        else:
            indent = len(match.group(2))
            code = "".join(line[indent:] for line in match.group(4).splitlines(keepends=True))
            out.append(Block(match.group(3), code, heading))
    return out


def commands(code: str) -> list[list[str]]:
    """The shell commands of a bash block as argv lists (continuations joined, comments
    dropped, `a && b` split)."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            out.append(words[:cut])
            words = words[cut + 1 :]
    return out


def assignments(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """`A=1 B=2 cmd ...` -> ({A: 1, B: 2}, [cmd, ...])."""
    env = {}
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
        name, value = argv[0].split("=", 1)
        env[name] = value
        argv = argv[1:]
    return env, argv


def excluded(argv: list[str]) -> str | None:
    argv = assignments(argv)[1]
    for prefix, reason in EXCLUDED.items():
        if tuple(argv[: len(prefix)]) == prefix:
            return reason
    return None


@dataclass
class Walk:
    """A reader following the docs in one terminal: a working folder, the folder the
    last `cd` left them in (a block that downloads the dataset starts again from the
    working folder, as a fresh download does), the environment and the stand-ins."""

    root: Path
    env: dict[str, str]
    substitutions: dict[str, str]  # text -> stand-in, anywhere
    tokens: dict[str, str]  # a whole command word -> stand-in (the docs' FILE, URL, ...)
    cwd: Path | None = None
    outputs: dict[str, str] = field(default_factory=dict)  # command as written -> output
    skipped: list[str] = field(default_factory=list)

    def sub(self, text: str) -> str:
        for old, new in self.substitutions.items():
            text = text.replace(old, new)
        return text

    def bash(self, block: Block) -> None:
        argvs = commands(block.code)
        if self.cwd is None or any(a[:2] == ["hf", "download"] for a in argvs):
            self.cwd = self.root
        for argv in argvs:
            shown = shlex.join(argv)
            reason = excluded_section(block.heading) or excluded(argv)
            if reason:
                self.skipped.append(f"{shown}: {reason}")
            elif argv[0] == "cd":
                self.cwd = self.cwd / argv[1]
                assert self.cwd.is_dir(), f"{shown}: no folder {self.cwd}"
            elif argv[0] == "export":
                for assignment in argv[1:]:
                    name, value = assignment.split("=", 1)
                    self.env[name] = self.sub(value)
            else:
                extra, argv = assignments([self.tokens.get(a) or self.sub(a) for a in argv])
                argv[0] = sys.executable if argv[0] == "python" else argv[0]
                self.outputs[shown] = self._run(argv, shown, env=self.env | extra)

    def python(self, block: Block, cwd: Path | None = None, python: str = sys.executable,
               prelude: str = "", replace: dict[str, str] | None = None) -> str:  # fmt: skip
        code = prelude + self.sub(block.code)
        for old, new in (replace or {}).items():
            assert old in code, f"the block of {block.heading!r} no longer holds {old!r}"
            code = code.replace(old, new)
        shown = f"python block {len(self.outputs)} of {block.heading!r}"
        code += f"\nprint({BLOCK_DONE!r})\n"  # the block ran to its end
        output = self._run([python, "-c", code], shown, cwd or self.cwd or self.root)
        assert BLOCK_DONE in output, f"{shown} stopped before its last line:\n{output[-4000:]}"
        self.outputs[shown] = output
        return output

    def _run(self, argv: list[str], shown: str, cwd: Path | None = None, env=None) -> str:
        cwd = cwd or self.cwd
        done = subprocess.run(
            argv, cwd=cwd, env=env or self.env, capture_output=True, text=True, timeout=600
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{shown} (in {cwd}) failed:\n{output[-4000:]}"
        return output


@pytest.fixture(scope="module")
def servers():
    model, judge = AudioModel(), Judge()
    yield model, judge
    model.stop()
    judge.stop()


def new_walk(root: Path, servers, staged: Path) -> Walk:
    model, judge = servers
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "REDVOX_JUDGE"))}
    env |= {
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # `source .venv/bin/activate`
        "HF_HUB_OFFLINE": "1",  # nothing may reach the Hub
        "HF_HOME": str(root / ".hf-home"),
    }
    substitutions = {
        '"FBK-MT/RedVox"': json.dumps(str(staged)),  # the repo id: the staged folder
        "http://host:8000/v1": model.base_url,  # the GPU machine's vLLM
        "https://api.openai.com/v1": judge.base_url,  # the judge
        "path/to/musan": str(DEMO.noise_bank),
        "path/to/config.yaml": str(DEMO_CONFIG),
    }
    tokens = {"FILE": str(DEMO_CONFIG), "URL": judge.base_url, "JUDGE": "stand-in-judge"}
    return Walk(root, env, substitutions, tokens)


def yaml_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```", markdown, re.M | re.S)


def uses_evaluator(block: Block, step: str) -> bool:
    return any(a[:3] == ["python", "evaluation/evaluate.py", step] for a in commands(block.code))


def test_the_readmes_commands_run_as_written(tmp_path, servers, copy_demo_cache):
    """Build, check, select, add a condition, represent, stage, verify, load, run the
    harness, judge and report: every README block in order, on the demo corpus."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    staged = tmp_path / "out" / "1.0.0" / "staged"
    walk = new_walk(tmp_path, servers, staged)
    copy_demo_cache(tmp_path / "out" / ".cache")  # the cache that `--out out` uses: warm
    condition = next(y for y in yaml_blocks(text) if "name: noise_c" in y)
    (tmp_path / "noise_c.yaml").write_text(condition, encoding="utf-8")
    for block in blocks(text):
        if block.lang == "python":
            walk.python(block)
            continue
        if uses_evaluator(block, "judge") and walk.cwd is not None:
            # step 1 of the step-by-step path, "run your model", is prose: the outputs the
            # harness wrote above have that layout and stand in for the reader's own
            shutil.copytree(walk.cwd / "runs" / "qwen2-audio" / "outputs", walk.cwd / "outputs")
        walk.bash(block)
        if staged.is_dir() and not (tmp_path / "redvox").exists():
            shutil.copytree(staged, tmp_path / "redvox")  # what `hf download` gives

    ran = walk.outputs
    assert {"1.0.0", "1.1.0"} <= set(ran["redvox build --list-versions"].split())
    assert (tmp_path / "out" / "1.0.0" / "public" / "manifest.json").is_file()
    assert (tmp_path / "items.txt").read_text().splitlines()
    assert list((tmp_path / "out" / "1.0.0+noise_c").rglob("*.parquet"))
    verify = next(
        out for command, out in ran.items() if command.startswith("redvox release verify")
    )
    assert "verified" in verify and "FAILED" not in verify
    harness = tmp_path / "redvox" / "runs" / "qwen2-audio" / "report" / "report.md"
    assert "| Qwen__Qwen2-Audio-7B-Instruct | 137 |" in harness.read_text()
    assert (tmp_path / "redvox" / "report" / "report.md").is_file()
    assert list((tmp_path / "redvox" / "outputs").rglob("*.gpt5-5.jsonl"))


def test_the_cards_commands_run_as_written(tmp_path, servers, demo_release, request):
    """The dataset card of a staged release, read as a Hub user reads it: the loading
    recipes (the loading script with `datasets` 3.6), the inference loop (with a model
    that always declines), the harness, the evaluator's help, judge and report."""
    shutil.copytree(demo_release["staged"], tmp_path / "redvox")  # `hf download` gives this
    card = (tmp_path / "redvox" / "README.md").read_text(encoding="utf-8")
    walk = new_walk(tmp_path, servers, tmp_path / "redvox")
    # the card's placeholders are the repo id and tag: the repo id is the staged folder
    walk.substitutions['"FBK-MT/RedVox"'] = json.dumps(str(tmp_path / "redvox"))
    for block in blocks(card):
        if block.lang == "bash":
            walk.bash(block)
        elif "loading_script/redvox.py" in block.code:
            try:  # datasets 3.6, in its own environment (tests/test_loading_paths.py)
                old = request.getfixturevalue("old_datasets_python")
            except pytest.skip.Exception as exc:
                walk.skipped.append(f"loading-script block: {exc}")
                continue
            # the block continues the one above it, which imports load_dataset
            printed = walk.python(block, python=str(old), prelude="from datasets import load_dataset\n",
                                  replace={"\n)\n": ")\nprint(len(ds), ds['entry_key'][0])\n"})  # fmt: skip
            assert printed.split()[0] == str(count_rows(tmp_path / "redvox", "en"))
        elif block.heading == "How to run a model":
            # the reader's model: this one declines everything
            walk.python(block, cwd=tmp_path / "redvox", replace={
                "raise NotImplementedError": 'return "I cannot help with that."'})  # fmt: skip
        else:
            walk.python(block)

    ran = walk.outputs
    written = (tmp_path / "redvox" / "outputs" / "my-model.jsonl").read_text().splitlines()
    assert len(written) == count_rows(tmp_path / "redvox")
    line = json.loads(written[0])
    assert "audio" not in line and line["output"] == "I cannot help with that."
    harness = tmp_path / "redvox" / "runs" / "qwen2-audio" / "report" / "report.md"
    assert f"| Qwen__Qwen2-Audio-7B-Instruct | {len(written)} |" in harness.read_text()
    assert "Usage:" in next(out for cmd, out in ran.items() if cmd.endswith("evaluate.py --help"))
    report = (tmp_path / "redvox" / "report" / "report.md").read_text()
    # the judged file is <model>.<judge model>.jsonl: the report names it so
    assert f"| my-model.stand-in-judge | {len(written)} |" in report
    assert any("hf download" in s for s in walk.skipped)


def count_rows(staged: Path, lang: str = "*") -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(s).num_rows for s in staged.glob(f"data/{lang}/*.parquet"))

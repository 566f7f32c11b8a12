"""Every document a tracked file cites is in the repository, and every section it
names in docs/ARCHITECTURE.md exists."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Documents that were cited but never part of the repository, and paths outside it.
OUTSIDE = re.compile(r"\bDESIGN\.md\b|\bSTYLE\.md\b|\.\./shared/")
SECTION = re.compile(r'docs/ARCHITECTURE\.md, "([^"]+)"')


def tracked_text_files() -> dict[str, str]:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    texts = {}
    for rel in listed:
        path = ROOT / rel
        if rel == "tests/test_cited_documents.py" or not path.is_file():
            continue
        try:
            texts[rel] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def test_no_file_cites_a_document_outside_the_repository():
    found = [
        f"{rel}:{n}: {line.strip()}"
        for rel, text in tracked_text_files().items()
        for n, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "cites a document that is not in the repository:\n" + "\n".join(found)


def test_cited_architecture_sections_exist():
    headings = set(re.findall(r"^## (.+)$", (ROOT / "docs/ARCHITECTURE.md").read_text(), re.M))
    cited = {
        (rel, name) for rel, text in tracked_text_files().items() for name in SECTION.findall(text)
    }
    assert cited, "no file cites docs/ARCHITECTURE.md"
    missing = sorted(f"{rel}: {name!r}" for rel, name in cited if name not in headings)
    assert not missing, "cites a section docs/ARCHITECTURE.md does not have:\n" + "\n".join(missing)

"""Docs that cannot drift: every verb in the README's table runs, every note the code cites exists, every path
CONTRIBUTING names exists."""

import importlib
import re
from pathlib import Path

import pytest

from tritonkit.cli import VERBS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "tritonkit"
# where CONTRIBUTING's relative paths are read from: the repository, the package (and its check/), a results folder
BASES = (ROOT, PACKAGE, PACKAGE / "check", ROOT / "benchmarks" / "results" / "h200")
# outputs a clean clone does not have (git-ignored), which a doc may name as such
IGNORED = {"out/", ".peers/", ".tritonkit/"}


def _readme_verbs() -> list[str]:
    table = re.search(r"\| verb \|.*?\n\n", (ROOT / "README.md").read_text(), re.S).group(0)
    return re.findall(r"^\| `([^`]+)` \|", table, re.M)


def test_every_verb_of_the_readme_table_exists():
    verbs = _readme_verbs()
    assert set(VERBS) <= {v.split()[-1] for v in verbs if v.startswith("tritonkit ")}, verbs
    assert "python3 -m tritonkit.check.resources" in verbs, verbs
    for v in verbs:
        if v.startswith("tritonkit "):
            assert v.split()[1] in VERBS, f"README's verb table names {v!r}, which the CLI does not have"
        else:
            module = re.fullmatch(r"python3? -m ([\w.]+)", v)
            assert module, f"README's verb table names {v!r}: neither `tritonkit VERB` nor `python -m MODULE`"
            assert hasattr(importlib.import_module(module.group(1)), "main"), v


def _cited_notes() -> dict[str, set[str]]:
    cited: dict[str, set[str]] = {}
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.sh"), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    files += [*(ROOT / "docs").glob("*.md"), ROOT / "benchmarks" / "results" / "h200" / "README.md"]
    for f in files:
        for note in re.findall(r"docs/notes/([\w.-]+\.md)", f.read_text()):
            cited.setdefault(note, set()).add(str(f.relative_to(ROOT)))
    return cited


def test_every_note_the_code_and_docs_cite_exists():
    cited = _cited_notes()
    assert len(cited) >= 5
    missing = {n: sorted(w) for n, w in cited.items() if not (ROOT / "docs" / "notes" / n).is_file()}
    assert not missing, missing


@pytest.mark.parametrize(
    "doc",
    ["CONTRIBUTING.md", "docs/notes/README.md", "docs/check.md", "docs/validate.md", "docs/bench.md", "docs/ops.md"],
)
def test_every_path_a_doc_names_exists(doc):
    text = (ROOT / doc).read_text()
    named = {p for p in re.findall(r"`([\w./-]+/[\w./-]*)`", text) if "<" not in p and not p.startswith("/")}
    if doc.startswith("docs/notes"):
        named |= set(re.findall(r"\]\(([\w.-]+\.md)\)", text))
    base = ROOT / Path(doc).parent
    named -= IGNORED
    # a module may be named without its suffix (`ops/_ints`)
    missing = sorted(p for p in named if not any((b / p).exists() or (b / f"{p}.py").exists() for b in (*BASES, base)))
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def _layout_section() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    start = text.index("## Layout")
    end = text.index("\n## ", start + 1)
    return text[start:end]


#: what every op folder holds, which CONTRIBUTING names once for all of them (`ops/<op>/`)
_OP_FILES = {"api", "kernel", "config", "reference", "spec", "vllm", "peers"}


def test_contributing_names_every_module_of_the_package():
    # a newcomer finds each module in the layout: a module added without a line there fails here
    layout = _layout_section()
    named = set(re.findall(r"`([A-Za-z_][\w./<>]*)`", layout))
    # a name may be written bare (`capture`), with its folder (`check/capture`) or as a file (`capture.py`)
    words = {n.rsplit("/", 1)[-1].removesuffix(".py") for n in named} | named
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        stem = path.stem
        if stem in ("__init__", "__main__"):
            continue
        if rel.parts[0] == "ops" and len(rel.parts) == 3 and stem in _OP_FILES:
            continue  # covered by ops/<op>/
        if rel.parts[:2] == ("check", "rules"):
            continue  # covered by rules/: one module per rule
        if stem not in words:
            missing.append(str(rel))
    assert not missing, f"CONTRIBUTING.md's layout does not name: {', '.join(missing)}"


def test_the_readme_front_page_stays_short_and_its_links_resolve():
    # issue 41: what it is, the two commands, one example per verb, links; the detail lives behind the links
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) < 10_000, f"README.md is {len(text.encode())} bytes"
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links and all((ROOT / link).exists() for link in links), [x for x in links if not (ROOT / x).exists()]

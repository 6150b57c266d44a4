"""The style the tools enforce: the tree is ruff-formatted and lint-clean, and CI and the pre-commit hook run both."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _ruff(*args):
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def ruff():
    if _ruff("--version").returncode != 0:
        pytest.skip("ruff is not installed (it comes with the test extra)")


@pytest.mark.parametrize("args", [("format", "--check", "."), ("check", ".")], ids=["format", "lint"])
def test_the_tree_passes(ruff, args):
    r = _ruff(*args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_ci_and_the_hook_run_format_and_lint():
    ci = (ROOT / ".ci" / "run").read_text()
    hook = (ROOT / ".pre-commit-config.yaml").read_text()
    for cmd in ("ruff format", "ruff check"):
        assert f"python3 -m {cmd}" in ci, cmd
        assert f"python3 -m {cmd} --force-exclude" in hook, cmd


def test_the_formatter_leaves_the_checker_corpora_alone(ruff):
    # their findings are pinned to source lines: a formatted corpus would move them
    r = _ruff("format", "--check", "--force-exclude", "tests/check/realworld", "-v")
    assert "No Python files found" in r.stderr + r.stdout or r.returncode == 0
    for corpus in ("tests/check/corpus", "tests/check/rules"):
        listed = _ruff("format", "--check", "--force-exclude", "--diff", corpus)
        assert listed.stdout.strip() == "", listed.stdout[:500]

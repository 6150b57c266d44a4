"""tritonkit.bench.base: two revisions of a tree imported side by side, on CPU, in throwaway git repos."""

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
import torch

import tritonkit
from tritonkit.bench import base

_GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


def _git(repo, *args):
    return subprocess.run([*_GIT, *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _write(repo, files):
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def _tree(op: str, factor: int) -> dict:
    """A tree shaped like tritonkit's: an op that registers tritonkit::<op> at import and reaches a sibling module
    by absolute imports (a statement, a from-import, and an import_module string)."""
    return {
        "src/tritonkit/__init__.py": "from . import something\n",
        "src/tritonkit/something.py": f"FACTOR = {factor}\n",
        "src/tritonkit/ops/__init__.py": (
            "import importlib\n"
            "from .scale.api import scale\n"
            "OP_NAMES = ('scale',)\n"
            "def get_spec(name):\n"
            "    if name not in OP_NAMES:\n"
            "        raise ValueError(f'unknown op {name!r}')\n"
            "    return importlib.import_module(f'{__name__}.{name}.spec').SPEC\n"
        ),
        "src/tritonkit/ops/scale/__init__.py": "",
        "src/tritonkit/ops/scale/api.py": (
            "import importlib\n"
            "import torch\n"
            "import tritonkit.something\n"
            "from tritonkit.something import FACTOR\n"
            f"@torch.library.custom_op('tritonkit::{op}', mutates_args=())\n"
            "def _op(x: torch.Tensor) -> torch.Tensor:\n"
            "    return x * tritonkit.something.FACTOR\n"
            "def scale(x, dispatcher=False):\n"
            f"    return torch.ops.tritonkit.{op}(x) if dispatcher else x * FACTOR\n"
            "def factor_by_name():\n"
            "    return importlib.import_module('tritonkit.something').FACTOR\n"
        ),
        "src/tritonkit/ops/scale/spec.py": (
            "import types\nfrom .api import scale\nSPEC = types.SimpleNamespace(name='scale', fn=scale)\n"
        ),
    }


@pytest.fixture
def op():
    """The op name both revisions register: unique per test, as torch keeps every registration for the process."""
    return f"scale_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def repo(tmp_path, op):
    """A repo whose HEAD~1 scales by 2 and HEAD by 3; both register the same op name."""
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q")
    for factor in (2, 3):
        _write(r, _tree(op, factor))
        _git(r, "add", "src")
        _git(r, "commit", "-q", "-m", f"factor {factor}")
    return r


def test_two_revisions_import_side_by_side(repo):
    running = sys.modules["tritonkit"]
    old, new = base.checkout("HEAD~1", repo), base.checkout("HEAD", repo)
    assert old.sha == _git(repo, "rev-parse", "HEAD~1") and new.sha == _git(repo, "rev-parse", "HEAD")
    assert old.label == f"base@{old.sha[:7]}" and old.root == repo / ".tritonkit" / "base" / old.sha
    old_pkg, new_pkg = old.import_package(), new.import_package()
    assert old_pkg.__name__ == f"tritonkit_base_{old.sha[:12]}" != new_pkg.__name__
    x = torch.ones(3)
    assert old.get_spec("scale").fn(x).tolist() == [2.0] * 3
    assert new.get_spec("scale").fn(x).tolist() == [3.0] * 3
    # absolute `tritonkit.` imports inside each tree reached that tree, by statement and by string
    api_old, api_new = old.module("ops.scale.api"), new.module("tritonkit.ops.scale.api")
    assert api_old.tritonkit is old_pkg and api_new.tritonkit is new_pkg
    assert (api_old.factor_by_name(), api_new.factor_by_name()) == (2, 3)
    # the running package is untouched and nothing leaked under its name
    assert sys.modules["tritonkit"] is running is tritonkit
    assert "tritonkit.something" not in sys.modules and "tritonkit.ops.scale" not in sys.modules
    assert old.import_package() is old_pkg
    # the materialized trees are ignored by the checkout that holds them
    assert _git(repo, "status", "--porcelain") == ""


def test_same_op_name_registers_once_per_revision(repo, op):
    old, new = base.checkout("HEAD~1", repo), base.checkout("HEAD", repo)
    old_pkg, new_pkg = old.import_package(), new.import_package()
    # each tree's op lives in its own namespace and keeps its own implementation (torch 2.13 would silently let
    # the second registration of one name replace the first)
    x = torch.ones(2)
    assert getattr(getattr(torch.ops, old.alias), op)(x).tolist() == [2.0, 2.0]
    assert getattr(getattr(torch.ops, new.alias), op)(x).tolist() == [3.0, 3.0]
    assert not hasattr(torch.ops.tritonkit, op)
    # the op body calls torch.ops.tritonkit.<op>: renamed to the tree's own namespace
    assert old_pkg.ops.scale(x, dispatcher=True).tolist() == [2.0, 2.0]
    assert new_pkg.ops.scale(x, dispatcher=True).tolist() == [3.0, 3.0]
    # the files on disk are the commit's, unchanged
    api = (old.root / "src/tritonkit/ops/scale/api.py").read_text()
    assert f"'tritonkit::{op}'" in api and old.alias not in api


def test_bad_revision_is_one_line_naming_it(repo):
    with pytest.raises(ValueError) as e:
        base.checkout("no-such-branch", repo)
    msg = str(e.value)
    assert "'no-such-branch'" in msg and "Needed a single revision" in msg and "\n" not in msg
    with pytest.raises(ValueError, match="'--help'"):
        base.checkout("--help", repo)
    with pytest.raises(ValueError, match="HEAD~9"):
        base.checkout("HEAD~9", repo)


def test_not_a_checkout(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(base.BaseTreeError, match=r"'HEAD'.*not in a git checkout"):
        base.checkout("HEAD", plain)
    # a package not at src/tritonkit of its checkout (an installed copy) names why
    (plain / "tritonkit").mkdir()
    with pytest.raises(base.BaseTreeError, match=r"'v1'.*not the src/tritonkit of a git checkout"):
        base.find_repo("v1", package_dir=plain / "tritonkit")


def test_tree_without_ops_or_package(tmp_path):
    r = tmp_path / "old"
    r.mkdir()
    _git(r, "init", "-q")
    _write(r, {"README": "no package yet\n"})
    _git(r, "add", "README")
    _git(r, "commit", "-q", "-m", "first")
    _write(r, {"src/tritonkit/__init__.py": "X = 1\n"})
    _git(r, "add", "src")
    _git(r, "commit", "-q", "-m", "package, no ops")
    with pytest.raises(base.BaseTreeError, match=r"'HEAD~1'.*no src/tritonkit/__init__.py"):
        base.checkout("HEAD~1", r)
    tree = base.checkout("HEAD", r)
    with pytest.raises(base.BaseTreeError, match=r"base@\w+ \(HEAD\) has no tritonkit.ops"):
        tree.get_spec("rms_norm")
    assert not [n for n in sys.modules if n.startswith(tree.alias)]


def test_killed_materialization_is_redone_and_complete_one_reused(repo):
    sha = _git(repo, "rev-parse", "HEAD")
    store = repo / ".tritonkit" / "base"
    partial = store / sha / "src" / "tritonkit"
    partial.mkdir(parents=True)
    (partial / "__init__.py").write_text("raise RuntimeError('half-written')\n")
    stale = store / f".tmp-{sha[:12]}-killed"
    stale.mkdir()
    os.utime(stale, (time.time() - 2 * base._STALE_S,) * 2)
    tree = base.checkout("HEAD", repo)
    assert (tree.root / base.MARKER).read_text().strip() == sha
    assert "half-written" not in (tree.root / "src/tritonkit/__init__.py").read_text()
    assert not stale.exists() and sorted(p.name for p in store.iterdir()) == [sha]
    (tree.root / "kept").write_text("")
    assert (base.checkout(sha[:10], repo).root / "kept").exists()
    assert tree.get_spec("scale").fn(torch.ones(1)).tolist() == [3.0]


def test_racing_checkouts_agree(repo):
    roots, errors = [], []

    def run():
        try:
            roots.append(base.checkout("HEAD~1", repo).root)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(roots) == 4 and len(set(roots)) == 1
    assert sorted(p.name for p in roots[0].parent.iterdir()) == [roots[0].name]


def test_results_cache_round_trips(repo, tmp_path):
    tree = base.checkout("HEAD", repo, store=tmp_path / "store")
    d = tree.cache_dir("NVIDIA H200")
    assert d == tmp_path / "store" / "base-results" / tree.sha / "nvidia-h200" and d.is_dir()
    path = d / "points.json"
    assert base.load_points(path) == {}
    recs = [
        {
            "op": "rms_norm",
            "dtype": "bfloat16",
            "shape": {"num_tokens": 16, "hidden": 4096},
            "eager": {"median_us": 3.5},
        },
        {"op": "rms_norm", "dtype": "bfloat16", "shape": {"num_tokens": 32, "hidden": 4096}, "x": [1, 2]},
    ]
    meta = {"torch": "2.11", "triton": "3.6.0"}
    base.save_points(path, recs, meta)
    got = base.load_points(path, meta)
    # key order of the shape does not matter
    assert (
        got[base.point_key({"op": "rms_norm", "dtype": "bfloat16", "shape": {"hidden": 4096, "num_tokens": 16}})]
        == recs[0]
    )
    assert list(got.values()) == recs
    assert base.load_points(path, {"torch": "2.12", "triton": "3.6.0"}) == {}
    assert sorted(p.name for p in d.iterdir()) == ["points.json"]  # no temporary file left
    path.write_text("{ truncated")
    assert base.load_points(path) == {}
    with pytest.raises(ValueError, match="'shape'"):
        base.save_points(path, [{"op": "rms_norm", "dtype": "bfloat16"}])


def test_checkout_of_this_repository(tmp_path):
    try:
        base.find_repo("HEAD")
    except base.BaseTreeError as e:
        pytest.skip(f"tritonkit does not run from a git checkout: {e}")
    tree = base.checkout("HEAD", store=tmp_path)
    spec = tree.get_spec("rms_norm")
    assert spec.name == "rms_norm" and spec.fn.__module__.startswith(tree.alias + ".ops.")
    assert sys.modules["tritonkit"] is tritonkit
    assert tree.module("ops").rms_norm is not tritonkit.ops.rms_norm


def test_a_tree_carried_to_a_machine_without_git_is_used_by_its_sha(repo, tmp_path):
    # the GPU machine gets a copy of the working tree without .git: materialize here, carry .tritonkit along
    here = base.checkout("HEAD~1", repo)
    copy = tmp_path / "copy"  # no git checkout
    copy.mkdir()
    got = base.checkout(here.sha[:9], copy, store=here.store)
    assert (got.sha, got.root) == (here.sha, here.root)
    assert got.get_spec("scale").fn(torch.ones(2)).tolist() == [2.0, 2.0]
    # a name git would resolve, or a sha nobody carried, is still the one-line error
    with pytest.raises(base.BaseTreeError, match="not in a git checkout"):
        base.checkout("HEAD~1", copy, store=here.store)
    with pytest.raises(base.BaseTreeError, match="not in a git checkout"):
        base.checkout("0123456789", copy, store=here.store)
    # a copy whose git folder lacks the commit (the device tool's copy of a checkout): the carried tree too
    _git(copy, "init", "-q")
    got = base.checkout(here.sha[:9], copy, store=here.store)
    assert (got.sha, got.root) == (here.sha, here.root)
    with pytest.raises(base.BaseTreeError, match="not a commit"):
        base.checkout("0123456789", copy, store=here.store)

import os
import types

import torch

# No GPU: kernels run under Triton's interpreter. It must be on before any kernel module is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # the interpreter runs one program at a time; torch's intra-op threads only contend on small tensors
    torch.set_num_threads(1)

import pytest  # noqa: E402

import tritonkit  # noqa: E402

# Subprocesses (`python -m tritonkit ...`, often from a temporary cwd) must run the tritonkit under test, whatever
# installed copy or relative PYTHONPATH entry the test process found it through.
_SRC = os.path.dirname(os.path.dirname(os.path.abspath(tritonkit.__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_SRC] + [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")


#: tests marked `network` resolve installs against PyPI (minutes, and a network): opt in with this set to 1
NETWORK_ENV = "TRITONKIT_NETWORK_TESTS"
#: the full grids (every parameter of every test, and the tests marked `full`): `--full`, or this set to 1
FULL_ENV = "TRITONKIT_FULL_TESTS"
#: parameters the fast tier keeps of each parametrized test: the first, the last and evenly between them, plus one
#: for every op named in the test's ids (a test over the ops keeps every op)
FAST_PARAMS = 3


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help=f"every parameter of every grid and the tests marked `full` (the default samples each grid to "
        f"{FAST_PARAMS} and every op; {FULL_ENV}=1 does the same; .ci/run runs this)",
    )


def _full(config) -> bool:
    return config.getoption("--full") or os.environ.get(FULL_ENV, "") == "1"


def _fast_tier(items: list) -> tuple[list, list]:
    """(kept, dropped): each parametrized test's grid sampled as FAST_PARAMS says, in collection order."""
    from tritonkit.ops import OP_NAMES

    groups: dict[tuple, list[int]] = {}
    for i, item in enumerate(items):
        if getattr(item, "callspec", None) is not None:
            groups.setdefault((item.nodeid.split("[")[0]), []).append(i)
    drop: set[int] = set()
    for idx in groups.values():
        n = len(idx)
        if n <= FAST_PARAMS:
            continue
        keep = {idx[round(k * (n - 1) / (FAST_PARAMS - 1))] for k in range(FAST_PARAMS)}
        seen_ops = set()
        for i in idx:
            pid = items[i].callspec.id
            for op in OP_NAMES:
                if op in pid and op not in seen_ops:
                    seen_ops.add(op)
                    keep.add(i)
        drop.update(i for i in idx if i not in keep)
    return [x for i, x in enumerate(items) if i not in drop], [x for i, x in enumerate(items) if i in drop]


def pytest_collection_modifyitems(config, items):
    if not _full(config):
        # `slow` tests (a cold check of every built-in op, timed) run with the full grids
        full_only = [x for x in items if "full" in x.keywords or "slow" in x.keywords]
        kept, dropped = _fast_tier([x for x in items if "full" not in x.keywords and "slow" not in x.keywords])
        dropped += full_only
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    skip_net = pytest.mark.skip(reason=f"needs PyPI: set {NETWORK_ENV}=1 to run")
    if os.environ.get(NETWORK_ENV, "") != "1":
        for item in items:
            if "network" in item.keywords:
                item.add_marker(skip_net)
    if ON_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class _ForgettingMonkeyPatch(pytest.MonkeyPatch):
    """pytest's MonkeyPatch that empties the ops' memos (``tritonkit.ops.clear_caches``) after a patch of an op's
    ``config`` or ``api`` module, and after undoing one, as ``tritonkit.ops.overrides`` does: an op's configs, plans
    and recorded launches derive from those modules' names (its thresholds, kernels, ``launch``). Patches elsewhere
    (Triton's hooks, the launch path's switches) keep the memos: what they change is checked per call."""

    _touched = False

    @staticmethod
    def _derives_memos(obj) -> bool:
        name = getattr(obj, "__name__", "") if isinstance(obj, types.ModuleType) else ""
        return name.startswith("tritonkit.ops.") and name.rsplit(".", 1)[-1] in ("config", "api")

    def _after(self, before: int) -> None:
        # a delattr with raising=False of a name that is not there records nothing
        if len(self._setattr) > before and self._derives_memos(self._setattr[-1][0]):
            self._touched = True
            from tritonkit.ops import clear_caches

            clear_caches()

    def setattr(self, *args, **kwargs):
        before = len(self._setattr)
        super().setattr(*args, **kwargs)
        self._after(before)

    def delattr(self, *args, **kwargs):
        before = len(self._setattr)
        super().delattr(*args, **kwargs)
        self._after(before)

    def undo(self) -> None:
        super().undo()
        if self._touched:
            self._touched = False
            from tritonkit.ops import clear_caches

            clear_caches()


@pytest.fixture(autouse=True)
def _share_the_gpu(request, tmp_path_factory):
    """Under pytest-xdist on one GPU (``-n 4 --dist loadfile`` halves the GPU suite's time): tests share the card
    (unmarked ones run on it too), ``gpu_alone`` ones have it to themselves (tests/gpu_share.py), and each returns the
    memory its process cached before it lets go, a failed test's tensors included (pytest keeps its traceback, and
    with it the test's locals, until the next test starts), so a test that needs tens of GB does not meet another
    worker's freed-but-held blocks."""
    if not ON_GPU:
        yield
        return
    import gc
    import sys

    from gpu_share import gpu_share

    # the run's base folder, the same for every worker of one run (xdist gives each a subfolder of it)
    base = tmp_path_factory.getbasetemp()
    folder = base.parent if base.name.startswith("popen-gw") else base
    with gpu_share(folder, alone=request.node.get_closest_marker("gpu_alone") is not None):
        try:
            yield
        finally:
            for name in ("last_type", "last_value", "last_traceback", "last_exc"):
                if hasattr(sys, name):
                    setattr(sys, name, None)
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


@pytest.fixture
def monkeypatch():
    mp = _ForgettingMonkeyPatch()
    yield mp
    mp.undo()

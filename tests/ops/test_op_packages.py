"""``tritonkit.ops.<op>`` is the op's function, and its package's modules stay reachable through it.

``tritonkit.ops`` binds each op's function over its package's name; ``import tritonkit.ops.<op>.<module> as m``
walks attributes from ``tritonkit.ops``, so it fails unless the function carries the package's submodules.
"""

import inspect
import pathlib
import subprocess
import sys

import tritonkit.ops
import tritonkit.ops.rms_norm.api
from tritonkit.ops import OP_NAMES, rms_norm

OPS_DIR = pathlib.Path(tritonkit.ops.__file__).parent


def _modules(op: str) -> list[str]:
    return sorted(p.stem for p in (OPS_DIR / op).glob("*.py") if p.stem != "__init__")


def test_each_op_name_is_its_plain_function():
    for op in OP_NAMES:
        fn = getattr(tritonkit.ops, op)
        assert inspect.isfunction(fn), op
        assert fn is getattr(sys.modules[f"tritonkit.ops.{op}.api"], op), op
    assert rms_norm is tritonkit.ops.rms_norm.api.rms_norm


def test_import_of_every_op_module_resolves_in_a_fresh_interpreter():
    # fresh: the modules a test process already imported would hide a path that breaks on first import
    lines = ["import sys"]
    paths = [f"tritonkit.ops.{op}.{mod}" for op in OP_NAMES for mod in _modules(op)]
    for path in paths:
        lines += [f"import {path} as m", f"assert m is sys.modules[{path!r}], {path!r}"]
    lines += ["import tritonkit"] + [f"assert {path} is sys.modules[{path!r}], {path!r}" for path in paths]
    for op in OP_NAMES:
        lines += [f"from tritonkit.ops import {op} as fn", f"assert fn is sys.modules['tritonkit.ops.{op}.api'].{op}"]
    lines += [f"print('ok', {len(paths)})"]
    r = subprocess.run([sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["ok", str(len(paths))]
    assert len(paths) >= 5 * len(OP_NAMES)  # api, config, kernel, reference, spec at least, per op


def test_a_submodule_imported_later_is_reachable_through_the_function(monkeypatch):
    # what the import system does for a new submodule: set it on the package; the function must see it too
    import types

    package = sys.modules["tritonkit.ops.rms_norm"]
    late = types.ModuleType("tritonkit.ops.rms_norm.late")
    monkeypatch.setitem(sys.modules, late.__name__, late)
    try:
        setattr(package, "late", late)
        import tritonkit.ops.rms_norm.late as m

        assert m is late and tritonkit.ops.rms_norm.late is late
    finally:
        for obj in (package, rms_norm):
            if "late" in vars(obj):
                delattr(obj, "late")


def test_monkeypatch_reaches_a_module_by_its_dotted_path(monkeypatch):
    monkeypatch.setattr("tritonkit.ops.rms_norm.config.STREAM_BLOCK", 7)
    assert tritonkit.ops.rms_norm.config.STREAM_BLOCK == 7

"""``ops/<op>/`` is the whole op: every folder has the pieces the tools read, and whatever the tools find about an op
outside ``api`` (its vLLM form, its bench peers) lives in that folder too. Adding an op is one folder and one line
in ``ops/__init__.py``'s OP_NAMES (plus its vLLM form's re-export in ``ops/vllm.py``, where it has one)."""

import ast
import inspect
import pathlib

import pytest

import tritonkit.ops
import tritonkit.ops.vllm
from tritonkit.ops import OP_NAMES, get_spec
from tritonkit.spec import OpSpec

OPS_DIR = pathlib.Path(tritonkit.ops.__file__).parent
#: what every tool needs: the public function (api), kernels, their configs, the float64 oracle and the spec
REQUIRED = ("__init__.py", "api.py", "kernel.py", "config.py", "reference.py", "spec.py")
FOLDERS = sorted(p.name for p in OPS_DIR.iterdir() if (p / "__init__.py").is_file())


def missing_pieces(folder: pathlib.Path) -> list[str]:
    """What an op folder lacks of the files the tools read."""
    return [f for f in REQUIRED if not (folder / f).is_file()]


def _imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
    return found


def test_every_op_folder_is_registered_and_every_registered_op_has_a_folder():
    assert FOLDERS == sorted(OP_NAMES)


def test_a_folder_without_a_piece_is_caught(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "api.py").write_text("")
    assert missing_pieces(tmp_path) == ["kernel.py", "config.py", "reference.py", "spec.py"]


@pytest.mark.parametrize("op", FOLDERS)
def test_each_folder_has_what_the_tools_read(op):
    assert missing_pieces(OPS_DIR / op) == []
    spec = get_spec(op)
    assert isinstance(spec, OpSpec) and spec.name == op
    # the function users import, the spec's fn and the api's are one object
    fn = getattr(tritonkit.ops, op)
    assert spec.fn is fn is getattr(fn.api, op) and op in tritonkit.ops.__all__
    # check and validate read the boundary shapes; bench the sweep and the work model
    assert spec.boundary and spec.is_declared("sweep_shape") and spec.is_declared("work")
    assert spec.dtypes and callable(spec.reference)


@pytest.mark.parametrize("op", FOLDERS)
def test_kernel_and_reference_import_what_the_layout_allows(op):
    # Triton, and the device functions the ops share (ops/_fp8_jit, itself Triton only)
    kernel = _imports(OPS_DIR / op / "kernel.py") - {"__future__", ".._fp8_jit"}
    assert all(m == "triton" or m.startswith("triton.") for m in kernel), kernel
    reference = _imports(OPS_DIR / op / "reference.py")
    assert not any(m.startswith("triton") or m.endswith("kernel") for m in reference), reference


def test_the_shared_device_functions_import_only_triton():
    shared = _imports(OPS_DIR / "_fp8_jit.py") - {"__future__"}
    assert shared and all(m == "triton" or m.startswith("triton.") for m in shared), shared


@pytest.mark.parametrize("op", FOLDERS)
def test_an_ops_peers_live_in_its_folder(op):
    spec = get_spec(op)
    factories = {**spec.peers, **spec.speed_of_light}
    for name, factory in factories.items():
        module = factory.__module__
        assert module == f"tritonkit.ops.{op}.peers", f"{op}'s {name} peer is defined in {module}"
    # a peers.py no spec reads would be dead: the bench finds peers only through the spec
    assert (OPS_DIR / op / "peers.py").is_file() == bool(factories)


def test_every_vllm_form_lives_in_its_ops_folder_and_is_re_exported():
    forms = {}
    for op in FOLDERS:
        path = OPS_DIR / op / "vllm.py"
        if not path.is_file():
            continue
        mod = getattr(tritonkit.ops, op).vllm
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and not name.startswith("_") and obj.__module__ == mod.__name__:
                forms[name] = obj
    assert sorted(forms) == sorted(tritonkit.ops.vllm.__all__)
    for name, obj in forms.items():
        assert getattr(tritonkit.ops.vllm, name) is obj, name
    # ops/vllm.py defines no form of its own: it only gathers them
    assert not [
        n for n, o in vars(tritonkit.ops.vllm).items() if inspect.isfunction(o) and o.__module__ == "tritonkit.ops.vllm"
    ]

"""One test per Triton internal tritonkit reaches (all through ``tritonkit._triton_compat``): on a Triton that moved
one, the test that names it fails, and the seam module is the one file to review."""

import os
from pathlib import Path
import subprocess
import sys
import textwrap

import pytest
import torch
import triton
import triton.language as tl
from triton import knobs

from tritonkit import _triton_compat as compat
from tritonkit.check.capture.target import StubDriver, parse_arch, stub_driver

SM90 = compat.GPUTarget("cuda", 90, 32)


def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@pytest.fixture(scope="module")
def jit():
    # a JITFunction even under TRITON_INTERPRET=1 (the decorator would make the interpreter's wrapper)
    return compat.JITFunction(_add_one)


@pytest.fixture(scope="module")
def backend():
    return compat.make_backend(SM90)


@pytest.fixture(scope="module")
def packed(jit, backend):
    """(options, signature, constexprs, attrs) of one launch, as JITFunction.run computes them."""
    x = torch.empty(64, device="meta")
    bound, spec, options = compat.make_binder(jit, backend)(x, 50, BLOCK=64, debug=False)
    return compat.pack_args(jit, backend, {"BLOCK": 64, "debug": False}, bound, spec, options)


def test_make_backend_parses_options_for_a_target(backend):
    opts = backend.parse_options({"num_warps": 8})
    assert opts.num_warps == 8 and hasattr(opts, "num_stages")


def test_the_launch_internals_are_there_and_specialize_as_the_fast_path_keys(backend):
    ns = compat.launch_internals()
    assert ns is not None and ns.JITFunction is compat.JITFunction
    # an int's specialization tells 1, multiples of 16 and the rest apart (what the fast path's key relies on)
    keys = {n: ns.specialize(backend, n, False, True, True) for n in (1, 32, 33)}
    assert len(set(map(str, keys.values()))) == 3
    assert ns.HookChain().calls == [] and isinstance(ns.CompiledKernel.__dict__["run"], property)


def test_jit_run_launches_the_way_the_fast_path_copies(monkeypatch):
    # every Triton the README supports has a known convention, named after the release it was read from
    conv = compat.launch_convention(compat.launch_internals())
    assert conv is not None, f"Triton {compat.VERSION}: JITFunction.run is not in LAUNCH_CONVENTIONS"
    assert ".".join(compat.VERSION.split(".")[:2]) in conv.releases
    assert all(hasattr(compat.knobs.compilation, name) for name in conv.compilation_options)
    monkeypatch.setattr(compat, "LAUNCH_CONVENTIONS", {})
    assert not compat.launch_convention_ok(compat.launch_internals())
    assert not compat.launch_convention_ok(None)


def _cuda_launcher(cls=None, **fields):
    from triton.backends.nvidia.driver import CudaLauncher

    launcher = object.__new__(cls or CudaLauncher)  # __init__ would build the C launcher
    vars(launcher).update(
        launch=print,
        global_scratch_size=0,
        profile_scratch_size=0,
        launch_cooperative_grid=False,
        launch_pdl=True,
        arg_annotations=("annotations",),
        kernel_signature=b"signature",
        gsan_enabled=False,
    )
    vars(launcher).update(fields)
    return launcher


def test_the_cuda_launcher_calls_its_c_function_as_the_fast_path_does(monkeypatch):
    # every supported Triton's CudaLauncher.__call__ is one the fast path knows, named after the release it was read
    # from; tests/ops/test_launch.py checks that the C function gets exactly what __call__ would hand it
    from triton.backends.nvidia.driver import CudaLauncher

    direct = compat.direct_launch(_cuda_launcher(), ("packed",))
    assert direct is not None, f"Triton {compat.VERSION}: CudaLauncher.__call__ is not in LAUNCHER_CONVENTIONS"
    assert direct.launch is print and direct.call is CudaLauncher.__dict__["__call__"]
    assert ("packed",) in direct.head and direct.head[:2] == (False, True)
    assert (("annotations",) in direct.head) is direct.args_as_tuple
    conv = compat.LAUNCHER_CONVENTIONS[compat.source_digest(CudaLauncher.__call__)]
    assert conv.releases == ".".join(compat.VERSION.split(".")[:2])

    class Sub(CudaLauncher):
        pass

    assert compat.direct_launch(_cuda_launcher(Sub), ()) is None  # a subclass may do more
    assert compat.direct_launch(lambda *a: None, ()) is None
    assert compat.direct_launch(_cuda_launcher(global_scratch_size=None), ()) is None
    launcher = _cuda_launcher()
    del launcher.launch_pdl
    assert compat.direct_launch(launcher, ()) is None
    monkeypatch.setattr(compat, "LAUNCHER_CONVENTIONS", {})
    assert compat.direct_launch(_cuda_launcher(), ()) is None


def test_device_caches_hold_compiled_kernels_then_the_backend(jit):
    with stub_driver(parse_arch("sm_90")):
        with compat.fresh_device_caches(jit):
            kernel_cache, backend = compat.device_cache(jit, 0)
            assert kernel_cache == {} and hasattr(backend, "parse_options")
            assert compat.compiled_kernels(jit) == 0
            jit.device_caches[0][0]["a specialization"] = object()
            assert compat.compiled_kernels(jit) == 1
        # the kernel's own caches come back
        assert compat.compiled_kernels(jit) == 0
    assert compat.compiled_kernels(object()) == 0


def test_binder_binds_arguments_by_parameter_name(jit, backend):
    bound, spec, options = compat.make_binder(jit, backend)(torch.empty(8, device="meta"), 5, BLOCK=16)
    assert list(bound)[:3] == ["x_ptr", "n", "BLOCK"] and bound["n"] == 5


def test_pack_args_gives_the_signature_and_constexprs_run_compiles(packed):
    opts, signature, constexprs, attrs = packed
    assert signature["x_ptr"].startswith("*") and signature["BLOCK"] == "constexpr"
    assert 64 in constexprs.values() and hasattr(opts, "num_warps") and isinstance(attrs, dict)


LOWER = """
import torch, triton.language as tl
from tritonkit import _triton_compat as compat
from tritonkit.check.capture.target import interpreter_off

def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

target = compat.GPUTarget("cuda", 90, 32)
jit, backend = compat.JITFunction(_add_one), compat.make_backend(target)
bound, spec, options = compat.make_binder(jit, backend)(torch.empty(64, device="meta"), 50, BLOCK=64, debug=False)
opts, signature, constexprs, attrs = compat.pack_args(jit, backend, {"BLOCK": 64, "debug": False}, bound, spec, options)
with interpreter_off():
    mod, stages = compat.lower_to_ttir(jit, signature, constexprs, attrs, opts, target, backend)
print("tt.func" in str(mod), "_add_one" in str(mod), "ttgir" in stages)
"""


def test_lowering_a_specialization_to_ttir(tmp_path):
    # in a fresh process: once the interpreter has run here, triton.language is patched and nothing compiles
    script = tmp_path / "lower_add_one.py"  # a file: Triton reads a kernel's source
    script.write_text(LOWER)
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "True", "True"]


def test_capture_internals_are_there():
    assert compat.capture_missing() is None


@compat.JITFunction
def _decorated(x_ptr):
    pass


def test_def_site_names_the_file_and_line_of_the_def(jit):
    assert compat.def_site(jit) == (__file__, _add_one.__code__.co_firstlineno)
    # past the decorator, as Triton's own get_jit_fn_file_line reports it (3.9 dropped that helper)
    assert compat.def_site(_decorated) == (__file__, _decorated.fn.__code__.co_firstlineno + 1)


def test_def_site_reads_the_source_where_triton_has_no_helper(jit, monkeypatch):
    import triton.runtime.jit as triton_jit

    monkeypatch.delattr(triton_jit, "get_jit_fn_file_line", raising=False)
    assert compat.def_site(_decorated) == (__file__, _decorated.fn.__code__.co_firstlineno + 1)
    assert compat.def_site(jit) == (__file__, _add_one.__code__.co_firstlineno)


def test_the_interpreter_wraps_kernels_in_its_own_class():
    interpreted = compat.interpreted_function_type()
    with compat.knob_set(knobs.runtime, "interpret", True):
        k = triton.jit(_add_one)
    assert interpreted is not None and isinstance(k, interpreted) and hasattr(interpreted, "run")


def test_a_fresh_process_has_no_interpreter_patches_and_a_device_call_leaves_them():
    # an interpreted jit function called as a device function patches triton.language and never restores it
    code = textwrap.dedent("""
        import triton, triton.language as tl
        from tritonkit._triton_compat import interpreter_patched
        before = interpreter_patched()

        @triton.jit
        def _helper(x):
            return x + 1

        _helper(1)
        print(before, interpreter_patched())
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "True"]


def test_the_active_driver_is_swapped_and_restored():
    from triton.runtime.driver import driver

    before = getattr(driver, "_active", None)
    stub = StubDriver(SM90)
    with compat.active_driver(stub):
        assert driver.active is stub and driver.active.get_current_target() == SM90
    assert getattr(driver, "_active", None) is before


def test_the_stub_driver_implements_every_abstract_method():
    missing = getattr(compat.DriverBase, "__abstractmethods__", set()) - set(dir(StubDriver))
    assert not missing and StubDriver(SM90).get_current_device() == 0


def test_a_knob_set_in_the_block_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    outside = knobs.runtime.interpret
    with compat.knob_set(knobs.runtime, "interpret", False):
        assert knobs.runtime.interpret is False
    assert knobs.runtime.interpret == outside


def test_autotuner_keeps_what_the_checker_reads():
    k = triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])(
        compat.JITFunction(_add_one)
    )
    assert isinstance(k, compat.Autotuner)
    assert k.keys == ["n"] and len(k.configs) == 2 and k.arg_names[:2] == ["x_ptr", "n"]
    # the checker sets nargs around prune_configs, as Autotuner.run does
    assert callable(k.prune_configs) and k.fn is not None
    assert k.configs[0].all_kwargs()["BLOCK"] == 16
    assert callable(compat.Autotuner.run) and callable(compat.Autotuner.warmup)


def test_jit_function_keeps_what_the_launch_paths_read(jit):
    p = jit.params[0]
    assert (p.name, p.is_constexpr) == ("x_ptr", False) and jit.params[2].is_constexpr
    assert all(hasattr(p, a) for a in ("is_const", "do_not_specialize", "do_not_specialize_on_alignment"))
    assert isinstance(jit.used_global_vals, dict) and jit.pre_run_hooks == [] and isinstance(jit.cache_key, str)


def test_cuobjdump_ships_with_the_nvidia_backend():
    assert os.path.isfile(compat.cuobjdump_path())


def test_ptxas_is_the_one_triton_assembles_with():
    path = compat.ptxas_path(90)
    assert os.path.isfile(path) and os.access(path, os.X_OK)
    assert os.path.basename(path).startswith("ptxas")


# Triton modules whose contents are internal, and private attributes of Triton objects: only the seam reaches them
_INTERNAL_MODULES = ("triton._C", "triton.runtime", "triton.compiler", "triton.backends")
_INTERNAL_ATTRS = {"device_caches", "_pack_args", "create_function_from_signature", "native_specialize_impl"}


def _reaches(tree) -> list[str]:
    import ast

    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        if any(n == m or n.startswith(m + ".") for n in names for m in _INTERNAL_MODULES):
            out.append(f"line {node.lineno}: import {', '.join(names)}")
        if isinstance(node, ast.Attribute) and node.attr in _INTERNAL_ATTRS:
            out.append(f"line {node.lineno}: .{node.attr}")
    return out


def test_only_the_seam_reaches_triton_internals():
    import ast
    from pathlib import Path

    import tritonkit

    root = Path(tritonkit.__file__).parent
    found = {}
    for path in root.rglob("*.py"):
        if path.name != "_triton_compat.py" and (hits := _reaches(ast.parse(path.read_text()))):
            found[str(path.relative_to(root))] = hits
    assert not found, found
    assert _reaches(ast.parse("from triton.runtime.jit import JITFunction\nk.device_caches"))  # the scan sees them


def test_the_readme_states_the_supported_releases():
    # the README's support matrix and the releases .ci/triton-matrix tests are one list
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    table = readme[readme.index("### Supported Triton releases") :].split("\n\n")[1]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert rows == list(compat.SUPPORTED)
    assert compat.DEVELOPED_AGAINST == rows[0]


def test_the_checker_compiles_after_the_interpreter_left_its_patches(tmp_path):
    # the order CI met: an interpreted device call in the process (patching triton.language), then an in-process
    # Capture lowering a kernel; the copy of triton.language taken at tritonkit's import puts it back
    script = tmp_path / "leak_then_compile.py"
    script.write_text(
        textwrap.dedent("""
        import torch, triton, triton.language as tl
        from tritonkit._triton_compat import interpreter_patched
        from tritonkit.check.capture.launches import Capture
        from tritonkit.check.capture.target import Compiler, parse_arch

        @triton.jit
        def _helper(x):
            return x + 1

        @triton.jit
        def _k(x_ptr, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)

        _helper(1)
        leaked = interpreter_patched()
        compiler = Compiler(parse_arch("sm_90"), disk_cache=False)
        compiler.defer = True
        with Capture(compiler):
            _k[(4,)](torch.empty(256, device="meta"), BLOCK=64)
            ((_c, args, _tg),) = compiler.pending.values()
            ttir = compiler._ttir(*args)[0].str()
        print(leaked, interpreter_patched(), "tt.store" in ttir)
    """)
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "False", "True"], r.stdout


def test_restore_language_says_false_without_a_clean_copy(monkeypatch):
    import tritonkit._triton_compat as compat

    monkeypatch.setattr(compat, "interpreter_patched", lambda: True)
    monkeypatch.setattr(compat, "_PRISTINE_LANGUAGE", None)
    assert compat.restore_language() is False


def test_gluon_names_resolve_on_this_triton():
    # Gluon does not import under the interpreter: a process with it off. 3.8 renamed the TMA load and the cp.async
    # copy, 3.7 the barrier
    code = textwrap.dedent("""
        import triton
        from tritonkit import _triton_compat as compat
        load, barrier = compat.gluon_tma_load(), compat.gluon_barrier()
        copy = compat.gluon_async_load()
        major, minor = (int(x) for x in triton.__version__.split(".")[:2])
        print(load.__name__ == ("async_load" if (major, minor) >= (3, 8) else "async_copy_global_to_shared"))
        print(barrier.__name__ == ("barrier" if (major, minor) >= (3, 7) else "thread_barrier"))
        print(copy.__name__ == ("async_load" if (major, minor) >= (3, 8) else "async_copy_global_to_shared"))
    """)
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "True", "True"], r.stdout


def test_version_key_orders_releases_as_numbers():
    # the one place tritonkit reads a release's number (fused_moe's table fallback, the prefill's turns rule)
    assert compat.version_key("3.10.0") > compat.version_key("3.9.0") > compat.version_key("3.8.0")
    assert compat.version_key("3.9.0+git1a2b3c") == (3, 9, 0)
    assert compat.version_key("3.8.0") < (3, 9) <= compat.version_key("3.9.0")

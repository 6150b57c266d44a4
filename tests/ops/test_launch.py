"""The cached eager launcher (``tritonkit.ops._launch``) without a GPU.

Its key is checked against Triton's own binder (the function ``JITFunction.run`` keys its cache on) for an sm_90
target, on a probe kernel and on every launch the ops make over their boundary shapes and the model sweep. The
launch itself is driven through the real ``JITFunction.run`` with only the compiler and the CUDA launcher stubbed:
the fast path must hand the launcher exactly what ``run`` hands it.
"""

import importlib
import itertools
import sys
import types
import warnings

import pytest
import torch
import triton
import triton.language as tl
import triton.runtime.jit as triton_jit
from compile_keys import Recorder
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.driver import CudaLauncher
from triton.compiler import make_backend
from triton.compiler.compiler import CompiledKernel
from triton.runtime.jit import JITFunction, create_function_from_signature

import tritonkit.ops
from tritonkit import _triton_compat
from tritonkit.check.capture.target import interpreter_off, parse_arch, stub_driver
from tritonkit.models import MODELS, NUM_TOKENS_SWEEP
from tritonkit.ops import _launch, get_spec
from tritonkit.testing import MetaFill

TARGET = GPUTarget("cuda", 90, 32)
BACKEND = make_backend(TARGET)

_PROBE_SCALE = tl.constexpr(2)


def _probe(x_ptr, y_ptr, n, m, f, flag, BLOCK: tl.constexpr, FLAG: tl.constexpr):
    pid = tl.program_id(0)
    if FLAG:
        tl.store(x_ptr + pid, tl.load(x_ptr + pid) * _PROBE_SCALE)


def _probe_jit() -> JITFunction:
    # a JITFunction even under TRITON_INTERPRET=1 (the decorator would give the interpreter's wrapper)
    return JITFunction(_probe, do_not_specialize=["m"])


def _triton_key(kernel, args, constexprs, num_warps, num_stages=None, launch_pdl=False, maxnreg=None) -> str:
    """What ``JITFunction.run`` keys its cache on (minus the options it adds itself, equal for all calls here)."""
    binder = create_function_from_signature(kernel.signature, kernel.params, BACKEND)
    kw = dict(constexprs, num_warps=num_warps)
    if num_stages is not None:
        kw["num_stages"] = num_stages
    if launch_pdl:
        kw["launch_pdl"] = True
    if maxnreg is not None:
        kw["maxnreg"] = maxnreg
    _, specialization, options = binder(*args, **kw)
    return str(specialization) + str(options)


def _our_key(kernel, args, constexprs, num_warps, num_stages=None, launch_pdl=False, maxnreg=None):
    return _launch.cache_key(
        kernel, args, constexprs, num_warps, num_stages, BACKEND, launch_pdl=launch_pdl, maxnreg=maxnreg
    )


def _has_descriptor(call) -> bool:
    return any(_triton_compat.is_host_descriptor(type(a)) for a in call[0])


def _assert_same_split(kernel, calls):
    """Two calls share our key exactly when they share Triton's; every call is keyed, tensor-descriptor arguments
    (fused_moe's wgmma tiles, the Hopper prefill's K/V boxes) included."""
    ours = [_our_key(kernel, *c) for c in calls]
    assert None not in ours
    theirs = [_triton_key(kernel, *c) for c in calls]
    for i, j in itertools.combinations(range(len(calls)), 2):
        assert (ours[i] == ours[j]) == (theirs[i] == theirs[j]), (calls[i], calls[j])


T16 = torch.zeros(64, dtype=torch.float16)
T32 = torch.zeros(64, dtype=torch.float32)
CE = {"BLOCK": 64, "FLAG": True}


def _call(x=T16, y=T32, n=2, m=2, f=1.5, flag=True, ce=CE, num_warps=4, num_stages=None):
    return (x, y, n, m, f, flag), ce, num_warps, num_stages


PROBE_CALLS = [
    _call(),
    _call(x=T16[1:]),  # pointer 2 bytes past a 16-byte boundary
    _call(x=T16[8:]),  # 16 bytes past: aligned again
    _call(x=T32),
    _call(x=T16.view(torch.bfloat16)),
    _call(y=None),
    _call(n=1),
    _call(n=16),
    _call(n=17),
    _call(n=32),
    _call(n=0),
    _call(n=-16),
    _call(n=2**31 - 1),
    _call(n=2**31),
    _call(n=-(2**31)),
    _call(n=-(2**31) - 1),
    _call(n=2**63),
    _call(n=2**63 + 16),
    _call(m=1),
    _call(m=3),
    _call(m=16),
    _call(m=17),
    _call(m=2**31),
    _call(m=2**63),
    _call(f=0.0),
    _call(f=-1e300),
    _call(f=2),
    _call(flag=False),
    _call(ce={"BLOCK": 128, "FLAG": True}),
    _call(ce={"BLOCK": 64, "FLAG": False}),
    _call(ce={"BLOCK": 64, "FLAG": 1}),
    _call(ce={"BLOCK": 64.0, "FLAG": True}),
    _call(num_warps=8),
    _call(num_stages=3),
]


def test_key_splits_exactly_where_triton_does():
    _assert_same_split(_probe_jit(), PROBE_CALLS)


@pytest.mark.parametrize(
    "a, b, same",
    [
        (_call(n=1), _call(n=2), False),  # == 1 becomes a constant
        (_call(n=16), _call(n=17), False),  # divisible by 16
        (_call(n=16), _call(n=32), True),
        (_call(n=2), _call(n=3), True),
        (_call(n=2**31 - 16), _call(n=2**31), False),  # i32 -> i64
        (_call(x=T16), _call(x=T16[1:]), False),
        (_call(x=T16), _call(x=T16[8:]), True),
        (_call(x=T16), _call(x=T16.view(torch.bfloat16)), False),
        (_call(y=T32), _call(y=None), False),
        (_call(f=1.5), _call(f=-3.0), True),
        (_call(m=1), _call(m=2), True),  # do_not_specialize: neither ==1 nor %16 splits it
        (_call(m=16), _call(m=17), True),
        (_call(m=2), _call(m=2**31), False),  # ...but the integer width still does, as in Triton
        (_call(ce={"BLOCK": 64, "FLAG": True}), _call(ce={"BLOCK": 64, "FLAG": 1}), False),
        (_call(ce={"BLOCK": 64, "FLAG": True}), _call(ce={"FLAG": True, "BLOCK": 64}), True),
        (_call(), _call(num_warps=8), False),
        (_call(), _call(num_stages=3), False),
    ],
)
def test_key_examples(a, b, same):
    k = _probe_jit()
    assert (_our_key(k, *a) == _our_key(k, *b)) is same


def test_unhandled_arguments_take_the_normal_path():
    k = _probe_jit()
    assert _our_key(k, (T16, T32, 2, 2, 1.5, True, 64), {"FLAG": True}, 4) == _our_key(k, *_call())
    assert _our_key(k, *_call(f=torch.float16)) is None  # a dtype object
    assert _our_key(k, *_call(ce={"BLOCK": 64, "FLAG": tl.float16})) is None
    assert _our_key(k, (T16, T32, 2, 2, 1.5), CE, 4) is None  # a parameter left to its default
    assert _our_key(k, *_call(ce={"BLOCK": 64, "FLAG": True, "EXTRA": 1})) is None
    assert _our_key(triton.autotune([triton.Config({})], key=[])(k), *_call()) is None


OPS = {
    "rms_norm": ("_rms_norm_fwd_kernel",),
    "silu_and_mul": ("_silu_and_mul_fwd_kernel",),
    "rotary_embedding": ("_rotary_embedding_fwd_kernel",),
    "reshape_and_cache": ("_reshape_and_cache_kernel",),
    "paged_attention": (
        "_paged_attention_decode_kernel",
        "_paged_attention_merge_kernel",
        "_paged_attention_prefill_kernel",
        "_paged_attention_prefill_merge_kernel",
    ),
    "topk_softmax": ("_topk_softmax_kernel",),
    "moe_align_block_size": (
        "_moe_align_small_kernel",
        "_moe_align_count_kernel",
        "_moe_align_scan_kernel",
        "_moe_align_place_kernel",
    ),
    "fused_moe": (
        "_fused_moe_gemm1_kernel",
        "_fused_moe_gemm2_kernel",
        "_fused_moe_quant_kernel",
        "_fused_moe_sum_kernel",
    ),
    "rms_norm_quant_fp8": ("_rms_norm_quant_fp8_kernel",),
}
# kernels of another op an op launches (fused_moe aligns its slots first): recorded, not run, on meta tensors
STUBBED = {"fused_moe": ("moe_align_block_size", OPS["moe_align_block_size"])}


@pytest.mark.parametrize(
    "name, pdl",
    [(n, False) for n in OPS] + [("paged_attention", True), ("rms_norm_quant_fp8", True), ("fused_moe", True)],
    ids=list(OPS) + ["paged_attention-pdl", "rms_norm_quant_fp8-early-w", "fused_moe-slots-pdl"],
)
def test_op_launches_key_as_triton_does(monkeypatch, name, pdl):
    # every launch an op makes over its boundary shapes and the sweep: all handled by the fast path's key, split
    # exactly as Triton's binder splits them (paged attention also as an sm_90 GPU launches it: merge with PDL;
    # rms_norm_quant_fp8 also with its dynamic rows' early weight, launched under a register cap)
    api = getattr(tritonkit.ops, name).api
    if name == "paged_attention":
        monkeypatch.setattr(tritonkit.ops.paged_attention.config, "merge_pdl", lambda device: pdl)
    if name == "rms_norm_quant_fp8":
        monkeypatch.setattr(tritonkit.ops.rms_norm_quant_fp8.config, "DYNAMIC_EARLY_W", pdl)
    if name == "fused_moe" and pdl:
        # the slot path's A/B switch: GEMM2 as GEMM1's dependent (as on sm_90)
        monkeypatch.setattr(tritonkit.ops.fused_moe.config, "SLOTS_PDL", True)
        monkeypatch.setattr(tritonkit.ops.fused_moe.api._device, "pdl", lambda device: True)
    spec = get_spec(name)
    recs = {k: Recorder() for k in OPS[name]}
    kernels = {k: getattr(api, k) for k in OPS[name]}
    for k, rec in recs.items():
        monkeypatch.setattr(api, k, rec)
    if name in STUBBED:
        other, names = STUBBED[name]
        for k in names:
            monkeypatch.setattr(getattr(tritonkit.ops, other).api, k, Recorder())
    shapes = list(spec.boundary) + [
        spec.sweep_shape(m, t) for m in MODELS.values() if spec.has_layer(m) for t in NUM_TOKENS_SWEEP[:6]
    ]
    for shape in shapes:
        for dtype in spec.dtypes:
            spec.call(spec.make_inputs(shape, dtype, MetaFill()))
    for k, rec in recs.items():
        kernel = kernels[k]
        if not isinstance(kernel, JITFunction):
            kernel = JITFunction(kernel.fn, do_not_specialize=kernel.kwargs.get("do_not_specialize"))
        calls = []
        for grid, args, kw in rec.launches:
            kw = dict(kw)
            assert kw.pop("enable_fp_fusion") is True
            options = (kw.pop("num_warps"), kw.pop("num_stages", None), kw.pop("launch_pdl", False))
            calls.append((args, kw, *options, kw.pop("maxnreg", None)))
            assert type(grid) is tuple
        assert calls, f"{k} never launched"
        if k in ("_fused_moe_gemm1_kernel", "_fused_moe_gemm2_kernel"):
            assert any(_has_descriptor(c) for c in calls)  # the wgmma tiles' weights as TMA descriptors
        if name == "rms_norm_quant_fp8" and pdl:
            assert any(c[5] == 48 for c in calls)  # capped launches were among those keyed
        if name == "fused_moe" and pdl and k == "_fused_moe_gemm2_kernel":
            assert any(c[4] for c in calls)  # dependent launches were among those keyed
        if name == "fused_moe" and pdl and k == "_fused_moe_gemm1_kernel":
            assert any(c[1]["PDL_TRIGGER"] for c in calls)
        _assert_same_split(kernel, calls)


def test_normal_path_passes_exactly_the_old_call():
    rec = Recorder()
    _launch.launch(rec, (3, 2), (1, 2), {"A": 4}, 8)
    _launch.launch(rec, (3,), (1,), {}, 4, 2)
    _launch.launch(rec, (3,), (1,), {}, 4, None, launch_pdl=True)
    _launch.launch(rec, (3,), (1,), {}, 8, None, maxnreg=48)
    # FMA contraction asked for explicitly, so Triton 3.10's new default cannot change the ops' numerics
    assert rec.launches == [
        ((3, 2), (1, 2), {"A": 4, "num_warps": 8, "enable_fp_fusion": True}),
        ((3,), (1,), {"num_warps": 4, "enable_fp_fusion": True, "num_stages": 2}),
        ((3,), (1,), {"num_warps": 4, "enable_fp_fusion": True, "launch_pdl": True}),
        ((3,), (1,), {"num_warps": 8, "enable_fp_fusion": True, "maxnreg": 48}),
    ]


# -- the launch, through the real JITFunction.run with the compiler and CUDA launcher stubbed ----------------------


class _FakeCompiled(CompiledKernel):
    def __init__(self, calls):
        self.metadata = types.SimpleNamespace(target=TARGET, name="probe")
        self.name = "probe"
        self.module = object()  # handles "loaded": _init_handles does nothing
        self.function = 0xF00
        self.packed_metadata = ("packed",)
        self.src = None
        self._run = lambda *a: calls.append(a)

    def __del__(self):
        pass  # nothing was loaded (3.8 on, CompiledKernel.__del__ unloads a module)


def cuda_launcher(calls: list, **fields) -> CudaLauncher:
    """This Triton's own CUDA launcher, its ``__call__`` untouched, with a C launch function that records
    ``(caller, arguments)``: the caller is ``__call__`` where the launcher called it."""
    launcher = object.__new__(CudaLauncher)  # __init__ would build the C launcher

    def launch(*args):
        calls.append((sys._getframe(1).f_code.co_name, args))

    vars(launcher).update(
        launch=launch,
        num_ctas=1,
        global_scratch_size=0,
        global_scratch_align=1,
        profile_scratch_size=0,
        profile_scratch_align=1,
        launch_cooperative_grid=False,
        launch_pdl=True,
        arg_annotations=("annotations",),  # 3.7 on: read by the C launcher only, passed through as they are
        kernel_signature=b"signature",
        gsan_enabled=False,
    )
    vars(launcher).update(fields)
    return launcher


class _Harness:
    def __init__(self, monkeypatch, launcher=None):
        self.kernel = _probe_jit()
        self.calls, self.compiles, self.triton_runs = [], [], 0

        def do_compile(key, signature, device, constexprs, options, attrs, warmup):
            compiled = self.kernel.device_caches[device][0][key] = _FakeCompiled(self.calls)
            if launcher is not None:
                compiled._run = launcher
            self.compiles.append(key)
            return compiled

        real_key = triton_jit.compute_cache_key

        def counted_key(*a):
            self.triton_runs += 1
            return real_key(*a)

        monkeypatch.setattr(self.kernel, "_do_compile", do_compile, raising=False)
        monkeypatch.setattr(triton_jit, "compute_cache_key", counted_key)
        monkeypatch.setattr(_launch, "_DEVICE_TENSOR", "is_cpu")  # CPU tensors stand in for CUDA ones

    def launch(self, call=None, grid=(5, 2), launch_pdl=False, maxnreg=None):
        args, ce, nw, ns = call or _call()
        before = self.triton_runs
        _launch.launch(self.kernel, grid, args, ce, nw, ns, launch_pdl=launch_pdl, maxnreg=maxnreg)
        return "normal" if self.triton_runs > before else "fast"


@pytest.fixture
def harness(monkeypatch):
    # the binder imports gluon on first use, which asserts the interpreter's state: import it as the suite runs
    importlib.import_module("triton.experimental.gluon")
    with stub_driver(parse_arch("sm_90")), interpreter_off():
        yield _Harness(monkeypatch)


def test_fast_path_hands_the_launcher_what_run_does(harness):
    assert harness.launch() == "normal"
    assert harness.launch() == "fast"
    assert len(harness.compiles) == 1 and len(harness.calls) == 2
    normal, fast = harness.calls
    assert len(normal) == len(fast) == 9 + 8
    # grid, stream, function, packed metadata, then every bound argument in order, constexprs included
    assert fast[:6] == normal[:6] == (5, 2, 1, 0, 0xF00, ("packed",))
    assert all(a is b for a, b in zip(normal[9:], fast[9:]))
    assert fast[9:] == (T16, T32, 2, 2, 1.5, True, 64, True)
    # run passes Triton's hook chains (empty: nothing calls them) and their metadata; the fast path passes None
    assert normal[7] is knobs.runtime.launch_enter_hook and normal[8] is knobs.runtime.launch_exit_hook
    assert not normal[7].calls and not normal[8].calls
    assert fast[6:9] == (None, None, None)
    # the grid's missing dimensions are 1, as in run
    assert harness.launch(grid=(7,)) == "fast" and harness.calls[-1][:3] == (7, 1, 1)


def test_new_specialization_goes_through_run_once(harness):
    harness.launch(_call(n=16))
    assert harness.launch(_call(n=17)) == "normal"
    assert harness.launch(_call(n=17)) == "fast"
    assert harness.launch(_call(n=33)) == "fast"  # same class as 17
    assert harness.launch(_call(x=T16[1:])) == "normal"
    assert harness.launch(_call(m=7)) == "fast" and harness.calls[-1][9 + 3] == 7
    assert len(harness.compiles) == 3


@pytest.mark.parametrize("hook", ["launch_enter_hook", "launch_exit_hook"])
def test_launch_hooks_take_the_normal_path(harness, monkeypatch, hook):
    # the (stubbed) launcher is what calls the hooks: the launch must go where it is handed them
    harness.launch()
    pos = 7 if hook == "launch_enter_hook" else 8
    with monkeypatch.context() as m:  # Triton 3.6's way: add to the chain (proton does)
        chain = getattr(knobs.runtime, hook)
        m.setattr(chain, "calls", [print])
        assert harness.launch() == "normal" and harness.calls[-1][pos] is chain
    with monkeypatch.context() as m:  # the older way: the hook in the chain's place
        m.setattr(knobs.runtime, hook, print)
        assert harness.launch() == "normal" and harness.calls[-1][pos] is print
    with monkeypatch.context() as m:
        m.setattr(knobs.runtime, hook, None)
        assert harness.launch() == "fast"
    assert harness.launch() == "fast"


def test_patched_run_and_pre_run_hooks_take_the_normal_path(harness, monkeypatch):
    harness.launch()
    k = harness.kernel
    args, ce, nw, ns = _call()
    assert _launch._prepare(k, (1,), args, ce, nw, ns) is not None
    with monkeypatch.context() as m:  # what tritonkit check's Capture does
        m.setattr(JITFunction, "run", lambda self, *a, **kw: None)
        assert _launch._prepare(k, (1,), args, ce, nw, ns) is None
    with monkeypatch.context() as m:
        m.setattr(k, "pre_run_hooks", [lambda *a, **kw: None])
        assert harness.launch() == "normal"
    with monkeypatch.context() as m:
        m.setattr(knobs.runtime, "interpret", True)
        assert _launch._prepare(k, (1,), args, ce, nw, ns) is None
    assert _launch._prepare(k, [1], args, ce, nw, ns) is None  # a grid that is not a tuple
    assert harness.launch() == "fast"


def test_cpu_tensors_take_the_normal_path(harness, monkeypatch):
    harness.launch()
    monkeypatch.setattr(_launch, "_DEVICE_TENSOR", "is_cuda")
    assert _launch._prepare(harness.kernel, (1,), *_call()) is None
    assert harness.launch() == "normal"


def test_switch_and_env_var(harness, monkeypatch):
    harness.launch()
    _launch.set_enabled(False)
    try:
        assert harness.launch() == "normal" and not _launch.available()[0]
    finally:
        _launch.set_enabled(True)
    assert harness.launch() == "fast"
    monkeypatch.setenv(_launch.ENV_VAR, "0")
    assert not _launch._env_enabled()
    monkeypatch.setenv(_launch.ENV_VAR, "1")
    assert _launch._env_enabled()


def test_cleared_triton_cache_recompiles(harness):
    harness.launch()
    harness.kernel.device_caches.clear()
    assert harness.launch() == "normal" and len(harness.compiles) == 2
    assert harness.launch() == "fast"


def test_changed_global_raises_as_in_triton(harness, monkeypatch):
    harness.kernel.cache_key  # records the globals the kernel reads, as a compile would
    harness.launch()
    assert harness.launch() == "fast"
    monkeypatch.setitem(globals(), "_PROBE_SCALE", tl.constexpr(3))
    with pytest.raises(RuntimeError, match="_PROBE_SCALE"):
        harness.launch()


def test_unhandled_argument_takes_the_normal_path(harness):
    # an int past u64 makes native_specialize_impl raise: the normal path reports it, not the fast path
    with pytest.raises(OverflowError):
        harness.launch(_call(n=2**64))


def test_the_path_is_on_for_this_triton():
    on, why = _launch.available()
    assert on, why
    assert f"Triton {triton.__version__}" in why


def test_unknown_triton_falls_back_and_says_so_once(harness, monkeypatch):
    from tritonkit import _triton_compat

    monkeypatch.setattr(_triton_compat, "LAUNCH_CONVENTIONS", {})
    _launch._convention.cache_clear()
    monkeypatch.setattr(_launch, "_STATES", {})
    try:
        with pytest.warns(_launch.FastLaunchOffWarning, match=f"Triton {triton.__version__}.*TRITONKIT_FAST_LAUNCH=0"):
            assert harness.launch() == "normal"
        assert not _launch.available()[0] and "not one it knows" in _launch.available()[1]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once, not at every launch
            assert harness.launch() == "normal" and harness.launch() == "normal"
    finally:
        _launch._convention.cache_clear()


def test_an_inspection_hook_takes_the_normal_path(harness, monkeypatch):
    # Triton 3.7 on: run adds a custom pipeline to the key while knobs.runtime.add_stages_inspection_hook is set
    if not _launch._convention().inspection_hook:
        pytest.skip(f"Triton {triton.__version__} has no add_stages inspection hook")
    harness.launch()
    bound = _launch.launch(harness.kernel, (5, 2), *_call(), front=2)
    assert harness.launch() == "fast" and bound is not None
    with monkeypatch.context() as m:
        m.setattr(knobs.runtime, "add_stages_inspection_hook", lambda: ("k", "h"))
        assert _launch._prepare(harness.kernel, (5, 2), *_call()) is None
        assert _launch.launch_bound((bound,), [(T16, T32)]) is False
    assert harness.launch() == "fast"


def test_the_conventions_extra_options_split_the_key(harness, monkeypatch):
    # Triton 3.9 keys a compile on knobs.compilation.fpsan_homomorphic_casts: a kernel compiled with one value must
    # never be launched for the other
    names = _launch._convention().compilation_options
    if not names:
        pytest.skip(f"Triton {triton.__version__}'s run adds no compilation knob to its key")
    assert harness.launch() == "normal"
    bound = _launch.launch(harness.kernel, (5, 2), *_call(), front=2)
    assert harness.launch() == "fast"
    for name in names:
        with monkeypatch.context() as m:
            m.setattr(knobs.compilation, name, not getattr(knobs.compilation, name))
            assert _launch.launch_bound((bound,), [(T16, T32)]) is False
            assert harness.launch() == "normal" and harness.launch() == "fast"
    assert harness.launch() == "fast" and len(harness.compiles) == 1 + len(names)


def test_capture_still_sees_every_launch(harness):
    # tritonkit check patches JITFunction.run: a kernel launched before (so cached here) is still captured
    from tritonkit.check.capture.launches import Capture
    from tritonkit.check.capture.target import Compiler

    harness.launch()
    assert harness.launch() == "fast"
    n = len(harness.calls)
    with Capture(Compiler(parse_arch("sm_90"), disk_cache=False)) as cap:
        _launch.launch(harness.kernel, (5, 2), *_call())
        _launch.launch(harness.kernel, (5, 2), *_call())
    assert cap.n_launches == 2 and len(harness.calls) == n


def test_a_programmatic_dependent_launch_is_its_own_key(harness):
    # launch_pdl is a compile option: the launcher Triton builds for it carries the attribute, so a kernel launched
    # without it must never stand in for one launched with it (nor the other way round)
    assert harness.launch() == "normal"
    assert harness.launch(launch_pdl=True) == "normal"
    assert harness.launch(launch_pdl=True) == "fast"
    assert harness.launch() == "fast"
    assert len(harness.compiles) == 2


def test_a_register_cap_is_its_own_key(harness):
    # maxnreg is a compile option: a kernel built under one cap never stands in for one built under another or none
    assert harness.launch() == "normal"
    assert harness.launch(maxnreg=48) == "normal"
    assert harness.launch(maxnreg=64) == "normal"
    assert harness.launch(maxnreg=48) == "fast"
    assert harness.launch() == "fast"
    assert len(harness.compiles) == 3
    a, b, c = (_our_key(_probe_jit(), *_call(), maxnreg=m) for m in (None, 48, 64))
    assert len({a, b, c}) == 3


def test_a_bound_launch_repeats_with_new_leading_arguments(harness, monkeypatch):
    # what paged_attention keeps per layout: the launcher, the grid and the trailing arguments, repeated with new
    # leading tensors exactly as run would launch them, without a key; nothing at all where run must see it
    assert _launch.launch(harness.kernel, (5, 2), *_call()) is None
    bound = _launch.launch(harness.kernel, (5, 2), *_call(), front=2)  # compiled by the first: a fast launch
    assert isinstance(bound, _launch.Bound) and harness.triton_runs == 1
    assert isinstance(_launch.launch(harness.kernel, (5, 2), *_call(n=16), front=2), _launch.Bound)  # and run's
    assert harness.triton_runs == 2 and len(harness.calls) == 3
    x, y = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    assert _launch.launch_bound((bound,), [(x, y)]) is True
    assert harness.triton_runs == 2 and len(harness.calls) == 4
    assert harness.launch(_call(x=x, y=y)) == "fast"
    replayed, fast = harness.calls[-2:]
    assert replayed[:9] == fast[:9] and replayed[9:11] == (x, y) and replayed[11:] == fast[11:]
    with monkeypatch.context() as m:
        m.setattr(knobs.runtime.launch_enter_hook, "calls", [print])
        assert _launch.launch_bound((bound,), [(x, y)]) is False
    with monkeypatch.context() as m:
        m.setattr(harness.kernel, "pre_run_hooks", [print])
        assert _launch.launch_bound((bound,), [(x, y)]) is False
    with monkeypatch.context() as m:
        m.setattr(knobs.runtime, "debug", True)
        assert _launch.launch_bound((bound,), [(x, y)]) is False
    harness.kernel.device_caches.clear()
    assert _launch.launch_bound((bound,), [(x, y)]) is False
    assert len(harness.calls) == 5


@pytest.mark.parametrize("names", [(), ("instrumentation_mode",), ("instrumentation_mode", "instrumentation_mode")])
def test_compilation_extras_read_each_knob_of_the_convention(monkeypatch, names):
    # what the key holds of knobs.compilation, one value per name in the convention, read at every call
    from tritonkit import _triton_compat

    conv = _triton_compat.LaunchConvention("test", inspection_hook=False, compilation_options=names)
    monkeypatch.setattr(knobs.compilation, "instrumentation_mode", "a mode")
    assert _launch._compilation_extras(conv) == ("a mode",) * len(names)
    monkeypatch.setattr(knobs.compilation, "instrumentation_mode", "another")
    assert _launch._compilation_extras(conv) == ("another",) * len(names)


# -- the C launch function under Triton's CUDA launcher -------------------------------------------------------------


@pytest.fixture
def cuda(monkeypatch):
    """The harness with this Triton's CudaLauncher as every compiled kernel's launcher; ``.c_calls`` records its C
    launch function's calls."""
    importlib.import_module("triton.experimental.gluon")
    c_calls = []
    with stub_driver(parse_arch("sm_90")), interpreter_off():
        h = _Harness(monkeypatch, cuda_launcher(c_calls))
        h.c_calls = c_calls
        yield h


def _same_objects(a: tuple, b: tuple) -> bool:
    """The same objects in the same places (tuples compared inside: 3.7 on, the kernel's arguments are one)."""
    return len(a) == len(b) and all(x is y or (type(x) is tuple and _same_objects(x, y)) for x, y in zip(a, b))


def _kernel_args(c_args: tuple, entry) -> tuple:
    """The probe kernel's eight arguments in one call of the C launch function."""
    return c_args[-1] if entry.direct.args_as_tuple else c_args[-8:]


def _launcher_convention() -> _triton_compat.LauncherConvention:
    return _triton_compat.LAUNCHER_CONVENTIONS[_triton_compat.source_digest(CudaLauncher.__call__)]


def test_the_c_launch_gets_exactly_what_the_launcher_would_hand_it(cuda):
    # the fast path skips CudaLauncher.__call__ and calls its C function with the very objects __call__ would pass
    assert cuda.launch() == "normal" and cuda.c_calls[-1][0] == "__call__"
    assert cuda.launch() == "fast" and cuda.c_calls[-1][0] == "_fire"
    _, normal = cuda.c_calls[-2]
    _, fast = cuda.c_calls[-1]
    entry = next(iter(_launch._STATES[id(cuda.kernel)].entries.values()))
    assert entry.direct is not None
    # what the fast path handed the launcher before: no launch metadata, no hooks
    entry.run(5, 2, 1, 0, 0xF00, ("packed",), None, None, None, *_kernel_args(fast, entry))
    caller, through_call = cuda.c_calls.pop()
    assert caller == "__call__" and _same_objects(fast, through_call)
    # and what JITFunction.run hands it, but for the launch metadata and the two hook chains it passes
    differ = [i for i, (x, y) in enumerate(zip(normal, fast)) if not _same_objects((x,), (y,))]
    assert len(normal) == len(fast) and len(differ) == 3
    assert all(fast[i] is None for i in differ)
    assert {normal[i] for i in differ[1:]} == {knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook}
    assert fast[:5] == (5, 2, 1, 0, 0xF00) and ("packed",) in fast and (False, True) == fast[5:7]


def test_a_bound_launch_takes_the_c_launch_too(cuda):
    cuda.launch()
    bound = _launch.launch(cuda.kernel, (5, 2), *_call(), front=2)
    x, y = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    assert _launch.launch_bound((bound,), [(x, y)]) is True
    caller, replayed = cuda.c_calls[-1]
    assert caller == "_fire" and _kernel_args(replayed, bound.entry) == (x, y, 2, 2, 1.5, True, 64, True)
    assert cuda.launch(_call(x=x, y=y)) == "fast" and _same_objects(cuda.c_calls[-1][1], replayed)


def test_a_launcher_class_patched_later_is_called(cuda, monkeypatch):
    # a __call__ put on CudaLauncher after the kernel was first launched (a profiler's wrapper) still runs
    cuda.launch()
    seen = []
    real = CudaLauncher.__call__

    def wrapped(self, *a):
        seen.append(a)
        return real(self, *a)

    with monkeypatch.context() as m:
        m.setattr(CudaLauncher, "__call__", wrapped)
        assert cuda.launch() == "fast" and len(seen) == 1 and cuda.c_calls[-1][0] == "__call__"
    assert cuda.launch() == "fast" and cuda.c_calls[-1][0] == "_fire"


@pytest.mark.parametrize(
    "fields", [{"global_scratch_size": 64}, {"profile_scratch_size": 64}, {"gsan_enabled": True}], ids=str
)
def test_a_launcher_with_more_to_do_is_called(fields):
    # scratch to allocate, GSan: __call__ does more than one C call, so the fast path calls the launcher
    if "gsan_enabled" in fields and not _launcher_convention().more_work_flags:
        pytest.skip(f"Triton {triton.__version__}'s launcher has no GSan")
    launcher = cuda_launcher([], **fields)
    assert _triton_compat.direct_launch(launcher, ("packed",)) is None
    entry = _launch._Entry({}, "key", types.SimpleNamespace(run=launcher, function=1, packed_metadata=()), {})
    assert entry.direct is None


def test_cuda_tensors_under_the_interpreter_take_no_target_path(monkeypatch):
    # the interpreter runs no Gluon kernel, wgmma or PDL: a CUDA tensor under it gets the portable paths (the
    # Hopper prefill, the Gluon MoE GEMMs and the merge's PDL all key on this capability)
    import triton

    from tritonkit.ops import _device

    monkeypatch.setattr(_device, "_cuda_capability", lambda index: (9, 0))
    monkeypatch.setattr(triton.knobs.runtime, "interpret", True)
    assert _device.capability(torch.device("cuda", 0)) is None
    monkeypatch.setattr(triton.knobs.runtime, "interpret", False)
    assert _device.capability(torch.device("cuda", 0)) == (9, 0)


def test_the_hopper_prefill_keys_as_triton_does(monkeypatch):
    # the Gluon prefill (sm_90): a GluonJITFunction whose last parameter is num_warps (bound from the launch's) and
    # whose K/V arrive as TMA descriptors; its launches over prompt and chunk shapes split where Triton's do
    from tritonkit.check.resources import record_launches
    from tritonkit.spec import Shape

    api = tritonkit.ops.paged_attention.api
    for k in OPS["paged_attention"]:  # kernel.py's kernels (interpreted in this process): recorded, not run
        monkeypatch.setattr(api, k, Recorder())
    spec = get_spec("paged_attention")
    shapes = [
        Shape(num_seqs=s, q_len=q, context=c, num_heads=32, num_kv_heads=8, head_dim=d, block_size=16, causal=1)
        for s, q, c in ((1, 1024, 0), (1, 128, 4096 - 128), (1, 8192, 0), (1, 512, 1536))
        for d in (64, 128)
    ]
    calls, kernel = [], None
    for shape in shapes:
        for ln in record_launches(lambda: spec.call(spec.make_inputs(shape, torch.bfloat16, MetaFill()))):
            if ln.name != "_paged_attention_prefill_hopper_kernel":
                continue
            kernel = ln.kernel
            kw = dict(ln.kwargs)
            assert kw.pop("enable_fp_fusion") is True
            calls.append((ln.args, kw, kw.pop("num_warps"), kw.pop("num_stages", None), kw.pop("launch_pdl", False)))
    assert kernel is not None and _triton_compat.runs_as_jit_function(type(kernel)) and type(kernel) is not JITFunction
    assert len(calls) >= 4 and all(_has_descriptor(c) for c in calls)
    with stub_driver(parse_arch("sm_90")), interpreter_off():
        _assert_same_split(kernel, calls)

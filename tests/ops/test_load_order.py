"""Loads that must leave together, read in the sm_90 SASS (compiled on this CPU in a child process without the
interpreter; cuobjdump ships with Triton).

ptxas schedules a load late, next to its first use, when nothing stops it: rms_norm's weight load went out only once
x had arrived, and the paged decode kernel's block-table and seqused_k loads only once cu_seqlens_q had: a second
memory round trip before the first useful instruction, most of a decode-sized call's time. A CTA barrier after the
loads pins them (loads do not cross it; it does not wait for them). The property checked: before the kernel's
first barrier there are loads, and no instruction before it touches what they load.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch
import triton
from compile_keys import Recorder
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.compiler.compiler import ASTSource
from triton.runtime.jit import JITFunction, create_function_from_signature

import tritonkit.ops
from tritonkit.check.capture.target import interpreter_off, stub_driver
from tritonkit.models import MODELS
from tritonkit.ops import get_spec
from tritonkit.testing import MetaFill

TARGET = GPUTarget("cuda", 90, 32)
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
pytestmark = pytest.mark.skipif(not os.access(CUOBJDUMP, os.X_OK), reason="Triton's cuobjdump is not installed")


def _first_launch(op: str, kernel_name: str, shape):
    api = getattr(tritonkit.ops, op).api
    names = [k for k in dir(api) if k.endswith("_kernel")]
    kernels = {k: getattr(api, k) for k in names}
    recs = {k: Recorder() for k in names}
    try:
        for k, rec in recs.items():
            setattr(api, k, rec)
        with stub_driver(TARGET), interpreter_off():
            get_spec(op).call(get_spec(op).make_inputs(shape, torch.bfloat16, MetaFill()))
    finally:
        for k, kern in kernels.items():
            setattr(api, k, kern)
    kernel = kernels[kernel_name]
    if not isinstance(kernel, JITFunction):  # the interpreter's wrapper keeps the decorator's arguments
        kernel = JITFunction(kernel.fn, do_not_specialize=kernel.kwargs.get("do_not_specialize"))
    grid, args, kwargs = recs[kernel_name].launches[0]
    return kernel, args, kwargs


def _sass(kernel, args, kwargs) -> str:
    backend = make_backend(TARGET)
    kw = dict(kwargs, debug=False)
    bound, spec, options = create_function_from_signature(kernel.signature, kernel.params, backend)(*args, **kw)
    opts, signature, constexprs, attrs = kernel._pack_args(backend, kw, bound, spec, options)
    cache, prev = tempfile.mkdtemp(), triton.knobs.cache.dir
    try:
        with stub_driver(TARGET), interpreter_off():
            triton.knobs.cache.dir = cache
            compiled = triton.compile(
                ASTSource(kernel, signature, constexprs, attrs), target=TARGET, options=opts.__dict__
            )
        path = os.path.join(cache, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        return subprocess.run([CUOBJDUMP, "-sass", path], capture_output=True, text=True, check=True).stdout
    finally:
        triton.knobs.cache.dir = prev
        shutil.rmtree(cache, ignore_errors=True)


def prologue_loads(sass: str) -> tuple[int, set[int]]:
    """(global loads between the last branch and the first CTA barrier, registers of theirs that an instruction
    before the barrier touches). Counting restarts at a branch: a loop before the barrier (the prefill kernel's
    binary search for its sequence) uses its loads by necessity."""
    loaded: set[int] = set()
    touched: set[int] = set()
    n = 0
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s*([^;]*);", line)
        if not m:
            continue
        ins = re.sub(r"^@!?P\w+\s+", "", m.group(1))  # the predicate, if any
        if ins.startswith("BAR.SYNC"):
            return n, touched
        if ins.startswith("BRA"):
            loaded, touched, n = set(), set(), 0
            continue
        touched |= {int(r) for r in re.findall(r"\bR(\d+)\b", ins)} & loaded
        ld = re.match(r"LDG(\S*)\s+R(\d+)", ins)
        if ld:
            width = {"64": 2, "128": 4}.get(next(iter(re.findall(r"\.(64|128)\b", ld.group(1))), ""), 1)
            loaded |= set(range(int(ld.group(2)), int(ld.group(2)) + width))
            n += 1
    return n, touched


def test_prologue_loads_reads_a_listing():
    sass = """
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E R9, desc[UR4][R2.64] ;
        /*0030*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0050*/                   FADD R7, R7, R9 ;
    """
    assert prologue_loads(sass) == (2, set())
    assert prologue_loads(sass.replace("IADD3 R1, R1", "IADD3 R1, R6")) == (2, {6})
    # a predicated 128-bit load still covers four registers
    assert prologue_loads(sass.replace("LDG.E.128", "@!P1 LDG.E.128").replace("IADD3 R1, R1", "IADD3 R1, R7")) == (
        2,
        {7},
    )
    # loads before a branch (a loop's) do not count
    assert prologue_loads(
        sass.replace("/*0030*/                   IADD3 R1, R1, 0x1, RZ", "/*0030*/                   BRA 0x10")
    ) == (0, set())


_PREFILL = dict(num_seqs=1, q_len=4096, context=0, num_heads=32, num_kv_heads=8, head_dim=128, block_size=16, causal=1)
# (op, kernel, shape): the kernel's first launch at the op's llama3-8b sweep point of that many tokens (with these
# overrides), or at this shape
CASES = {
    "rms_norm-residual0": ("rms_norm", "_rms_norm_fwd_kernel", (1, {"residual": 0})),
    "rms_norm-residual1": ("rms_norm", "_rms_norm_fwd_kernel", (1, {"residual": 1})),
    "paged-decode": ("paged_attention", "_paged_attention_decode_kernel", (4, {})),
    "paged-prefill": ("paged_attention", "_paged_attention_prefill_kernel", _PREFILL),
}
# read by their own tests (not a prologue property)
OTHER_CASES = {
    # built with the child's TRITONKIT_QK_EARLY_LOADS=1
    "qk-early-loads": ("qk_norm_rope_cache", "_qk_norm_rope_cache_kernel", (4096, {})),
}


def _case_sass(name: str) -> str:
    from tritonkit.spec import Shape

    op, kernel, where = {**CASES, **OTHER_CASES}[name]
    if isinstance(where, dict):
        shape = Shape(**where)
    else:
        shape = get_spec(op).sweep_shape(MODELS["llama3-8b"], where[0])
        shape = shape.replace(**where[1]) if where[1] else shape
    return _sass(*_first_launch(op, kernel, shape))


@pytest.fixture(scope="module")
def sass():
    # the suite runs under TRITON_INTERPRET=1, whose kernels cannot be compiled: a child without it
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # kernel.py's prefill kernel is the one read at the prefill case's 4096-token prompt, which on sm_90 the Hopper
    # kernel takes by default (its loads are TMA boxes from a load warp, not a prologue)
    env["TRITONKIT_PREFILL_HOPPER"] = "0"
    env["TRITONKIT_QK_EARLY_LOADS"] = "1"
    out = subprocess.run(
        [sys.executable, __file__],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize("case", list(CASES))
def test_prologue_loads_leave_before_any_is_used(sass, case):
    # rms_norm: the weight with x (and the residual); paged decode and prefill: seqused_k and the first
    # block-table entries, then (after the barrier) cu_seqlens_q
    n, touched = prologue_loads(sass[case])
    assert n >= 2 and not touched, f"{n} loads before the first barrier; registers used before it: {touched}"


def test_qk_early_loads_leave_before_the_norms_barriers(sass):
    # TRITONKIT_QK_EARLY_LOADS: in the q program and in the k/v program (the listing's two parts, each ending in its
    # EXITs) cos/sin, and the k/v program's v, leave with the head's loads: no global load after a part's first
    # CTA barrier (the norm's cross-warp reduction), where without it cos/sin (and v) wait for it
    parts = re.split(r"[^\n]*\bEXIT\b[^\n]*\n", sass["qk-early-loads"])
    checked = 0
    for part in parts:
        lines = [ln for ln in part.splitlines() if re.search(r"/\*[0-9a-f]{4,5}\*/", ln)]
        bar = next((i for i, ln in enumerate(lines) if "BAR.SYNC" in ln), None)
        if bar is None:
            continue
        checked += 1
        late = [ln.strip() for ln in lines[bar:] if re.search(r"\bLDG\.", ln)]
        assert not late, late[:3]
        assert sum(1 for ln in lines[:bar] if re.search(r"\bLDG\.", ln)) >= 4
    assert checked == 2, checked


if __name__ == "__main__":
    print(json.dumps({name: _case_sass(name) for name in {**CASES, **OTHER_CASES}}))

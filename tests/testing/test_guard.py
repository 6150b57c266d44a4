"""Validation catches a kernel that writes out of bounds or overwrites its input (guard regions, input copies)."""

import json
import subprocess
import sys

import torch
import triton
import triton.language as tl
from conftest import DEVICE

from tritonkit.spec import OpSpec
from tritonkit.testing import validate_case
from tritonkit.testing.guard import GuardAllocations, guard_inputs


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, MASK_STORE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if MASK_STORE:
        tl.store(y_ptr + offs, x, mask=mask)
    else:
        tl.store(y_ptr + offs, x)


@triton.jit
def _clobber_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x, mask=mask)
    # scratch use of the input: the caller's x is gone
    tl.store(x_ptr + offs, x * 0.0 + 7.0, mask=mask & (offs >= 3))


def copy(x, mask_store=True):
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), MASK_STORE=mask_store, BLOCK=64)
    return y


def clobber(x):
    y = torch.empty_like(x)
    _clobber_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
    return y


def _spec(fn, **kw):
    return OpSpec(
        "copy",
        fn,
        lambda s, d, f: {"x": f((s["n"],), d)},
        reference=lambda i, d: {"out": i["x"].clone()},
        boundary=[{"n": 70}],
        dtypes=(torch.float32,),
        **kw,
    )


def test_a_masked_kernel_passes_with_its_guards_intact():
    r = validate_case(_spec(copy), {"n": 70}, torch.float32, device=DEVICE)
    assert r.passed and r.violations == [], r.detail


def test_a_missing_store_mask_fails_naming_the_output_and_the_first_offset():
    r = validate_case(_spec(lambda x: copy(x, mask_store=False)), {"n": 70}, torch.float32, device=DEVICE)
    assert not r.passed and r.error == float("inf")
    # 70 elements in blocks of 64: the second block writes elements 70..127, the first past the end is 70
    assert r.detail.startswith("out: written out of bounds at element offset 70 (its storage holds 70 elements)")
    assert r.as_dict()["violations"] == r.violations


def test_a_kernel_that_overwrites_its_input_fails_naming_the_input_and_element():
    r = validate_case(_spec(clobber), {"n": 70}, torch.float32, device=DEVICE)
    assert not r.passed
    assert r.detail.startswith("input x was overwritten: element (3,) (flat offset 3) changed, and 67 elements")


def test_an_input_the_spec_declares_in_place_may_change():
    def inplace(x):
        x.mul_(1.0)
        _clobber_kernel[(2,)](x, torch.empty_like(x), x.numel(), BLOCK=64)
        return {"x": x}

    spec = OpSpec(
        "inplace",
        inplace,
        lambda s, d, f: {"x": f((s["n"],), d)},
        call=lambda i: inplace(**i),
        reference=lambda i, d: {"x": torch.where(torch.arange(i["x"].numel(), device=i["x"].device) >= 3, 7.0, i["x"])},
        boundary=[{"n": 70}],
        dtypes=(torch.float32,),
        inplace=("x",),
    )
    r = validate_case(spec, {"n": 70}, torch.float32, device=DEVICE)
    assert r.passed and r.violations == [], r.detail


def test_a_write_before_the_first_element_is_a_negative_offset():
    x = torch.arange(8.0)
    guarded, guards = guard_inputs({"x": x[2:], "n": 3})
    assert guarded["n"] == 3 and torch.equal(guarded["x"], x[2:])
    # the storage starts two elements before the view: one element before the storage is offset -1
    flat = torch.empty(0).set_(guarded["x"].untyped_storage(), guarded["x"].storage_offset() - 2 - 1, (1,), (1,))
    flat.fill_(1.0)
    assert guards[0].breach() == "written out of bounds at element offset -1, before its first element"


def test_views_of_one_storage_share_one_guarded_copy():
    base = torch.arange(12.0)
    guarded, guards = guard_inputs({"q": base[:4], "k": base[4:]})
    assert len(guards) == 1 and guards[0].name == "q, k"
    assert guarded["q"].untyped_storage().data_ptr() == guarded["k"].untyped_storage().data_ptr()
    assert torch.equal(guarded["k"], base[4:])


def test_allocations_keep_their_values_layout_and_alignment():
    src = torch.ones(2, 3).t()
    with GuardAllocations() as mode:
        z = torch.zeros(3, 5, dtype=torch.float16)
        f = torch.full((4,), 2.5)
        e = torch.empty_like(src)
        none = torch.empty(0)
    assert torch.equal(z, torch.zeros(3, 5, dtype=torch.float16)) and torch.equal(f, torch.full((4,), 2.5))
    assert e.stride() == (1, 3) and none.untyped_storage().nbytes() == 0
    assert len(mode.guards) == 3 and all(g.breach() is None for g in mode.guards)
    # the allocator aligns to 64 bytes (512 on CUDA); Triton specializes pointers divisible by 16
    assert all(t.data_ptr() % 64 == 0 for t in (z, f, e))


USER_KERNEL = """
import torch
import triton
import triton.language as tl
from tritonkit import OpSpec


@triton.jit
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0))


def unmasked(x):
    y = torch.empty_like(x)
    _k[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y


SPEC = OpSpec("unmasked", unmasked, lambda s, d, f: {"x": f((s["n"],), d)},
              reference=lambda i, d: {"out": i["x"].clone()}, boundary=[{"n": 1}, {"n": 200}],
              dtypes=(torch.float32,), families=("randn",))
"""


def test_cli_fails_the_case_and_the_json_says_why(tmp_path):
    (tmp_path / "unmasked_specs.py").write_text(USER_KERNEL)
    out = tmp_path / "v.json"
    p = subprocess.run(
        [sys.executable, "-m", "tritonkit", "validate", "unmasked_specs.py", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert p.returncode == 1, p.stderr
    assert "out: written out of bounds at element offset 1 (its storage holds 1 elements)" in p.stdout
    d = json.loads(out.read_text())
    assert d["meta"]["complete"] is True
    assert [r["passed"] for r in d["results"]] == [False, False]
    assert d["results"][1]["violations"] == [
        "out: written out of bounds at element offset 200 (its storage holds 200 elements)"
    ]


def test_inputs_past_the_copy_limit_stay_as_they_are(monkeypatch):
    import tritonkit.testing.guard as guard

    monkeypatch.setattr(guard, "COPY_LIMIT", 64)
    small, big = torch.zeros(4), torch.zeros(100)
    out, guards = guard.guard_inputs({"small": small, "big": big})
    assert out["big"] is big and out["small"] is not small and [g.name for g in guards] == ["small"]

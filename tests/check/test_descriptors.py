"""Tensor-descriptor loads and stores read as the pointer tiles they address (Triton 3.9 removed block pointers;
on sm_90 the TTIR keeps descriptor ops, which the memory rules would not see). The rules on a descriptor kernel are
in test_rules (``_desc_tiles_kernel``) and test_realworld (``chunk_kkt``); here, the rewrite itself, in the forms
Triton 3.6 and 3.9 print."""

import pytest

from tritonkit.check.ir.descriptors import lower
from tritonkit.check.ir.mlir import parse_module
from tritonkit.check.analysis.pointers import decompose

TTIR = """
#loc = loc("/src/k.py":1:0)
#loc1 = loc("/src/k.py":3:4)
module {
  tt.func public @k(%x_ptr: !tt.ptr<f32> loc("x_ptr"(#loc)), %M: i32 loc("M"(#loc)), %N: i32 loc("N"(#loc)), \
%sm: i32 loc("sm"(#loc))) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %c1_i64 = arith.constant 1 : i64 loc(#loc1)
    %s = arith.extsi %sm : i32 to i64 loc(#loc1)
    %d = tt.make_tensor_descriptor %x_ptr, [%M, %N], [%s, %c1_i64] : <f32>, <BLOCK> loc(#loc1)
    %d1 = tt.make_tensor_descriptor %x_ptr, [%N], [%c1_i64] : <f32>, <ROW> loc(#loc1)
    %row = tt.get_program_id x : i32 loc(#loc1)
    %v = tt.descriptor_load %d[%row, %c0_i32] : !tt.tensordesc<BLOCK> -> tensor<16x128xf32> loc(#loc1)
    tt.descriptor_store %d[%row, %c0_i32], %v : !tt.tensordesc<BLOCK>, tensor<16x128xf32> loc(#loc1)
    %w = tt.descriptor_load %d1[%row] : !tt.tensordesc<ROW> -> tensor<128xf32> loc(#loc1)
    tt.return loc(#loc1)
  } loc(#loc)
} loc(#loc)
"""
# how each release prints a descriptor's block type
FORMS = {"3.6": ("tensor<16x128xf32>", "tensor<128xf32>"), "3.9": ("16x128xf32", "128xf32")}


@pytest.mark.parametrize("form", FORMS)
def test_descriptor_accesses_become_masked_pointer_tiles_of_the_base_argument(form):
    block, row = FORMS[form]
    f = parse_module(TTIR.replace("<BLOCK>", f"<{block}>").replace("<ROW>", f"<{row}>")).entry_func()
    names = [op.name for op in f.ops]
    assert "tt.descriptor_load" not in names and "tt.descriptor_store" not in names
    (ld, ld1), (st,) = [op for op in f.ops if op.name == "tt.load"], [op for op in f.ops if op.name == "tt.store"]
    # the results, their types and locations stay those of the descriptor ops
    assert ld.results == ["v"] and f.types["v"] == "tensor<16x128xf32>" and ld.loc == "#loc1"
    assert st.operands[1] == "v" and len(st.operands) == 3 and len(ld.operands) == 2  # value, then mask
    kinds = {}
    for op in (ld, st, ld1):
        base, terms = decompose(f, op.operands[0])
        assert base == "x_ptr"
        kinds[op.name if op is not ld1 else "row"] = [t if t in ("row", "c0_i32") else f.defs[t].name for t in terms]
    # per axis (index + lane) * stride, the unit stride's axis split into its index and its lanes, as Triton's own
    # rewrite of a block pointer (so a loop's index reads as k * step)
    assert kinds == {
        "tt.load": ["arith.muli", "c0_i32", "tt.make_range"],
        "tt.store": ["arith.muli", "c0_i32", "tt.make_range"],
        "row": ["row", "tt.make_range"],
    }


def test_a_descriptor_from_the_host_is_left_alone():
    # a TensorDescriptor argument: no base pointer in the IR to rewrite onto
    text = """
module {
  tt.func public @h(%d: !tt.tensordesc<16x128xf32>, %i: i32) attributes {noinline = false} {
    %v = tt.descriptor_load %d[%i, %i] : !tt.tensordesc<16x128xf32> -> tensor<16x128xf32>
    tt.return
  }
}
"""
    assert lower(text) == text
    f = parse_module(text).entry_func()
    assert [op.name for op in f.ops] == ["tt.descriptor_load", "tt.return"]

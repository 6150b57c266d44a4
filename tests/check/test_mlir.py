"""The TTIR reader on printed forms it must survive: generic ops, multi-result values, nested regions whose
printed names repeat, and call-site locations."""

from tritonkit.check.ir.locations import Locations
from tritonkit.check.ir.mlir import elem_type, int_bits, parse_module, pointee, shape_of, split_top

TTIR = r"""
#loc = loc("/src/k.py":10:0)
#loc1 = loc("/src/k.py":12:10)
#loc2 = loc("/site-packages/triton/language/standard.py":290:10)
#loc3 = loc("/src/k.py":14:20)
#loc4 = loc("acc"(#loc3))
#loc5 = loc(callsite(#loc2 at #loc4))
#loc6 = loc(fused[#loc1, #loc3])
module {
  tt.func public @k(%x_ptr: !tt.ptr<f16> {tt.divisibility = 16 : i32} loc("x_ptr"(#loc)), %n: i32 loc("n"(#loc))) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %c1_i32 = arith.constant 1 : i32 loc(#loc1)
    %cst = arith.constant dense<1> : tensor<16xi32> loc(#loc1)
    %pid = tt.get_program_id x : i32 loc(#loc1)
    %r = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32> loc(#loc1)
    %pair:2 = "tt.split"(%r) : (tensor<16xi32>) -> (tensor<8xi32>, tensor<8xi32>) loc(#loc6)
    %0 = arith.cmpi slt, %pid, %n : i32 loc(#loc1)
    %1 = scf.if %0 -> (i32) {
      %2 = arith.addi %pid, %c1_i32 : i32 loc(#loc1)
      scf.yield %2 : i32 loc(#loc1)
    } else {
      %2 = arith.subi %pid, %c1_i32 : i32 loc(#loc1)
      scf.yield %2 : i32 loc(#loc1)
    } loc(#loc1)
    %3 = scf.while (%j = %c0_i32) : (i32) -> i32 {
      %4 = arith.cmpi slt, %j, %n : i32 loc(#loc1)
      scf.condition(%4) %j : i32 loc(#loc1)
    } do {
    ^bb0(%j: i32 loc("j")):
      %4 = arith.addi %j, %c1_i32 : i32 loc(#loc1)
      scf.yield %4 : i32 loc(#loc1)
    } loc(#loc1)
    %acc = "tt.reduce"(%r) <{axis = 0 : i32}> ({
    ^bb0(%a: i32 loc(callsite(#loc2 at #loc4)), %b: i32 loc(callsite(#loc2 at #loc4))):
      %5 = arith.addi %a, %b : i32 loc(#loc5)
      tt.reduce.return %5 : i32 loc(#loc5)
    }) : (tensor<16xi32>) -> i32 loc(#loc5)
    %p = tt.addptr %x_ptr, %pair#1 : !tt.ptr<f16>, tensor<8xi32> loc(#loc3)
    tt.return loc(#loc1)
  } loc(#loc)
} loc(#loc)
"""


def test_ops_operands_types_and_regions():
    mod = parse_module(TTIR)
    f = mod.entry_func()
    assert f.name == "k" and [a for a, _t, _l in f.args] == ["x_ptr", "n"]
    names = [op.name for op in f.ops]
    assert names[:6] == ["arith.constant"] * 3 + ["tt.get_program_id", "tt.make_range", "tt.split"]
    split = f.defs["pair#1"]
    assert split.results == ["pair#0", "pair#1"] and split.types == ["tensor<8xi32>", "tensor<8xi32>"]
    addptr = next(op for op in f.ops if op.name == "tt.addptr")
    assert addptr.operands == ["x_ptr", "pair#1"]
    red = f.defs["acc"]
    assert red.name == "tt.reduce" and red.types == ["i32"] and red.operands == ["r"]
    assert [o.name for o in red.regions[0][0].ops] == ["arith.addi", "tt.reduce.return"]
    iff = f.defs["1"]
    assert iff.name == "scf.if" and len(iff.regions) == 2 and iff.types == ["i32"] and iff.operands == ["0"]


def test_names_reused_in_sibling_regions_stay_distinct():
    f = parse_module(TTIR).entry_func()
    then_add = f.defs["1"].regions[0][0].ops[0]
    else_sub = f.defs["1"].regions[1][0].ops[0]
    assert then_add.results != else_sub.results
    assert f.defs[then_add.results[0]] is then_add and f.defs[else_sub.results[0]] is else_sub
    wh = f.defs["3"]
    before, after = wh.regions[0][0], wh.regions[1][0]
    assert before.args[0][0] != after.args[0][0]
    # the `do` region's add reads the `do` region's %j, not the `before` region's
    assert wh.regions[1][0].ops[0].operands[0] == after.args[0][0]
    assert wh.operands == ["c0_i32"] and wh.types == ["i32"]


def test_preorder_positions_nest():
    f = parse_module(TTIR).entry_func()
    iff = f.defs["1"]
    inner = [op for blk in iff.regions[0] + iff.regions[1] for op in blk.ops]
    assert all(iff.pos < op.pos <= iff.end for op in inner)
    assert list(iff.ancestors()) == [] and list(inner[0].ancestors()) == [iff]


def test_locations_resolve_aliases_names_callsites_and_fused():
    mod = parse_module(TTIR)
    f = mod.entry_func()
    locs = Locations(mod.aliases)
    red = f.defs["acc"]
    frames = locs.frames(red.loc)
    assert [(fr.file, fr.line) for fr in frames] == [
        ("/site-packages/triton/language/standard.py", 290),
        ("/src/k.py", 14),
    ]
    user = locs.user_frame(red.loc, ("/site-packages/triton/",))
    assert (user.file, user.line, user.name) == ("/src/k.py", 14, "acc")
    assert locs.user_frame(f.defs["pair#0"].loc, ()).line == 12


def test_type_helpers():
    assert elem_type("tensor<16x128x!tt.ptr<f16>>") == "!tt.ptr<f16>"
    assert elem_type("tensor<128xindex>") == "index" and int_bits("tensor<4xindex>") == 64
    assert shape_of("tensor<16x1xi32, #blocked>") == (16, 1) and shape_of("i32") == ()
    assert pointee("tensor<16x!tt.ptr<bf16>>") == "tensor<16xbf16>" and pointee("!tt.ptr<i64>") == "i64"
    assert split_top("a, tensor<1x2xf32, #b>, (c, d) -> e", ",") == ["a", " tensor<1x2xf32, #b>", " (c, d) -> e"]
    assert split_top("(x) -> (y, z)", "->") == ["(x) ", " (y, z)"]


ALT_FORMS = r"""
module {
  tt.func public @k(%arg0: !tt.ptr<f32>, %arg1: i32) {
    %0 = tt.get_program_id {axis = 1 : i32} : i32
    %1 = arith.muli %0, %arg1 : i32
    %2 = tt.addptr %arg0, %1 : !tt.ptr<f32>, i32
    tt.store %2, %cst : !tt.ptr<f32>
    ttg.barrier local|global
    %3 = tt.load %2 : !tt.ptr<f32>
    tt.return
  }
}
"""


def test_printed_forms_of_other_triton_releases():
    from tritonkit.check.analysis.ranges import Bindings, RangeAnalysis
    from tritonkit.check.analysis.memory import is_barrier

    f = parse_module(ALT_FORMS).entry_func()
    # program id written with an axis attribute, arguments without names or locations
    ra = RangeAnalysis(f, Bindings((1, 70_000, 1), {"arg1": (65_536, 65_536)})).run()
    (ov,) = ra.overflows.values()
    assert ov.op.name == "arith.muli" and ov.iv.hi == 69_999 * 65_536
    assert is_barrier("gpu.barrier") and is_barrier("ttg.barrier") and is_barrier("tt.debug_barrier")
    assert not is_barrier("ttng.wait_barrier") and not is_barrier("ttng.init_barrier")
    assert [op.name for op in f.ops if is_barrier(op.name)] == ["ttg.barrier"]


def test_an_operand_is_not_named_after_the_pointer_variable_it_only_feeds():
    # `ptrs = base + (i + n) * stride`: the sum inherits `ptrs`'s name in the printed IR; int32-offset must not
    # call the operand `ptrs` (the variable holding the whole pointer)
    from tritonkit.check.rules.int32_offset import _own_name

    f = parse_module(r"""
module {
  tt.func public @k(%base: !tt.ptr<f32>, %n: i32, %stride: i32) {
    %i = tt.get_program_id x : i32
    %ptrs_1 = arith.addi %i, %n : i32
    %ptrs_2 = arith.muli %ptrs_1, %stride : i32
    %ptrs = tt.addptr %base, %ptrs_2 : !tt.ptr<f32>, i32
    %seqlen = arith.addi %n, %n : i32
    tt.return
  }
}
""").entry_func()
    assert _own_name(f, "ptrs_1") == "" and _own_name(f, "ptrs_2") == ""
    assert _own_name(f, "seqlen") == "seqlen"


GLUON_WS = r"""
module attributes {"ttg.num-warps" = 8 : i32} {
  tt.func public @k(%x_ptr: !tt.ptr<f32> loc(unknown), %lo: i32 loc(unknown), %hi: i32 loc(unknown)) attributes {noinline = false} {
    %c1_i32 = arith.constant 1 : i32 loc(unknown)
    %c2_i32 = arith.constant 2 : i32 loc(unknown)
    ttg.warp_specialize(%x_ptr, %lo, %hi) attributes {requestedRegisters = array<i32: 32>}
    default {
      %d = arith.addi %lo, %c1_i32 : i32 loc(unknown)
      ttg.warp_yield loc(unknown)
    }
    partition0(%arg3: !tt.ptr<f32> loc(unknown), %arg4: i32 loc(unknown), %arg5: i32 loc(unknown)) num_warps(1) {
      scf.for %j = %arg4 to %arg5 step %c1_i32  : i32 {
        %it = arith.subi %j, %arg4 : i32 loc(unknown)
        %s = arith.remsi %it, %c2_i32 : i32 loc(unknown)
      } loc(unknown)
      ttg.warp_return loc(unknown)
    } : (!tt.ptr<f32>, i32, i32) -> () loc(unknown)
    tt.return loc(unknown)
  } loc(unknown)
} loc(unknown)
"""


def test_gluon_warp_specialize_partitions_take_the_ops_operands():
    # Gluon's custom form: `default {` and `partitionN(args) num_warps(k) {` are regions of the warp_specialize op,
    # the partitions' arguments its operands; a loop's `j - lo` counted up from lo is never negative
    from tritonkit.check.analysis.ranges import Bindings, Iv, RangeAnalysis

    f = parse_module(GLUON_WS).entry_func()
    (ws,) = [op for op in f.ops if op.name == "ttg.warp_specialize"]
    assert len(ws.regions) == 2 and ws.operands == ["x_ptr", "lo", "hi"]
    part = ws.regions[1][0]
    assert [a for a, _ in part.args] == ["arg3", "arg4", "arg5"]
    assert not [op for op in f.ops if op.name in ("default", "partition0")]
    ra = RangeAnalysis(f, Bindings((1, 1, 1), {"lo": (-5, 100), "hi": (0, 200)})).run()
    assert ra.get("arg4") == ra.get("lo")
    it = ra.get(next(op.results[0] for op in f.ops if op.name == "arith.subi"))
    assert isinstance(it, Iv) and it.lo == 0


def test_a_quoted_function_symbol():
    # Gluon names a helper specialized on a vector argument with characters MLIR quotes: `@"...(4,)cconstexpr_16..."`
    ttir = """
module {
  tt.func public @k(%x: i32) {
    %0 = tt.call @"m.k._row__Pi32_i32__(4,)cconstexpr_16__NW1"(%x) : (i32) -> i32
    tt.return
  }
  tt.func private @"m.k._row__Pi32_i32__(4,)cconstexpr_16__NW1"(%a: i32) -> i32 {
    %c1 = arith.constant 1 : i32
    %1 = arith.addi %a, %c1 : i32
    tt.return %1 : i32
  }
}
"""
    mod = parse_module(ttir)
    assert mod.entry_func().name == "k"
    helper = mod.funcs["m.k._row__Pi32_i32__(4,)cconstexpr_16__NW1"]
    assert [a for a, _t, _l in helper.args] == ["a"] and [op.name for op in helper.ops][-1] == "tt.return"

"""Rule semantics on small kernels: what each rule must flag and what it must leave alone. The kernels and their
cases are in tests/check/rule_cases/, one file per topic; a test names its kernels."""

from pathlib import Path

import pytest

from tritonkit.check import Options, run_check

CASES = Path(__file__).parent / "rule_cases"


@pytest.fixture(scope="module")
def report():
    rep = run_check([str(CASES)], Options(disk_cache=False))
    assert not [p for p in rep.problems if p.fatal], rep.problems
    return rep


def _on(report, kernel, rule=None):
    # a rule's silence only counts for a kernel that launched and whose IR the analysis read without giving up
    assert any(k["kernel"] == kernel and k["launches"] > 0 for k in report.kernels), f"{kernel} never launched"
    assert not [p for p in report.problems if kernel in p.where + " " + p.message], report.problems
    return [f for f in report.findings if f.kernel == kernel and (rule is None or f.rule == rule)]


def test_elementwise_indexing_silent_while_the_grid_keeps_it_in_int32(report):
    assert _on(report, "_flat_kernel") == []


def test_elementwise_indexing_flagged_once_the_grid_pushes_it_past_int32(report):
    (f,) = _on(report, "_flat_big_kernel", "int32-offset")
    assert f.case == {"n": 2**31 + 1}
    assert "program id" in f.message


def test_an_overflow_only_an_out_of_bounds_index_reaches_is_not_reported(report):
    # into an allocation of 2^20 elements any in-bounds offset fits int32 (and a wrapped product comes back
    # exact); into 2^33 elements a valid slot can need 64 bits
    (f,) = _on(report, "_slot_sized_kernel", "int32-offset")
    assert f.case == {"cache_elements": 2**33}
    (g,) = _on(report, "_wrap_then_divide_kernel", "int32-offset")
    assert g.message.startswith("`slot * stride`")
    # the filter is for loaded indices: a grid-derived tail past 2^31 overflows into an allocation under 2^31
    (h,) = _on(report, "_fill_tail_kernel", "int32-offset")
    assert "2,147,483,747" in h.message


def test_int32_offset_speaks_in_source_terms(report):
    (f,) = _on(report, "_flat_big_kernel", "int32-offset")
    assert f.message.startswith("`tl.program_id(0) * BLOCK` is computed in int32")
    assert "`tl.program_id(0)` in [0, 2,097,152]" in f.message and "`BLOCK` = 1,024" in f.message
    assert "`tl.program_id(0).to(tl.int64) * BLOCK`" in f.fix
    fs = {f.line: f for f in _on(report, "_nested_kernel", "int32-offset")}
    aug = fs[_line_after("_nested_kernel", "x_ptr += (bos")]
    # the int32 operand of `p * stride` is a parenthesized sum: quoted as written, never an IR name
    assert aug.message.startswith("`(bos * H + i_h) * stride` is computed in int32")
    assert "`bos * H + i_h` in [0," in aug.message and "`(bos * H + i_h).to(tl.int64) * stride`" in aug.fix
    swapped = fs[_line_after("_nested_kernel", "q_ptr += BLOCK")]
    # a constant on the left: canonicalization puts it on the right in the IR; the source order is kept
    assert swapped.message.startswith("`BLOCK * tl.program_id(0)` is computed")
    assert "`BLOCK * tl.program_id(0).to(tl.int64)`" in swapped.fix
    # constants folded into one are named as such, and the cast goes where the source names the operand
    (fo,) = _on(report, "_folded_kernel", "int32-offset")
    assert fo.message.startswith("`blk * BS * D` is computed in int32 and can reach 2,147,497,984")
    assert "`blk` in [0, 1,048,583]" in fo.message and "times 2,048, the expression's constants folded" in fo.message
    assert "`D` = 2,048" not in fo.message and "`blk.to(tl.int64) * BS * D`" in fo.fix
    assert not any("%" in f.message or "_i32" in f.message for f in report.findings if f.rule == "int32-offset")


def test_lanes_a_mask_keeps_from_memory_may_wrap(report):
    # tail rows past M wrap, but the row mask keeps them from memory and every row it keeps fits int32
    assert _on(report, "_row_masked_tile_kernel") == []
    # the same past 2^31 elements, a mask on the wrapped offset itself, an unmasked use of the offset: reported
    (f,) = _on(report, "_row_masked_tall_kernel", "int32-offset")
    assert f.message.startswith("`rows[:, None] * stride` is computed in int32") and f.case == {"rows": 715_827}
    for k in ("_offset_masked_tile_kernel", "_row_masked_load_only_kernel"):
        (g,) = _on(report, k, "int32-offset")
        assert "can reach 2,147,517,000" in g.message


def test_witness_is_a_real_launch_not_the_union_of_launches(report):
    assert _on(report, "_mixed_kernel") == []


def test_a_while_loops_fresh_value_stays_bounded_beside_a_growing_count(report):
    # the row is taken afresh each iteration ([0, 63]); only the count, which grows without bound, is given up on
    assert _on(report, "_while_fresh_row_kernel") == []
    (p,) = [p for p in report.problems if "_while_growing_offset_kernel" in p.where]
    assert "integer carried by an scf.while loop that the analysis could not bound" in p.message, p.message


def test_loop_carried_integers_are_extrapolated_over_the_trip_count(report):
    (f,) = _on(report, "_loop_carried_kernel", "int32-offset")
    assert f.case == {"iters": 3000}


def test_loaded_index_times_stride_is_flagged_unless_bounds_are_declared(report):
    (f,) = _on(report, "_slot_kernel", "int32-offset")
    assert "cast `slot` to tl.int64" in f.fix
    assert _on(report, "_slot_declared_kernel") == []


def test_a_loaded_operand_names_the_pointers_it_came_through_and_the_declaration(report):
    (f,) = _on(report, "_slot_kernel", "int32-offset")
    assert "`slot` is loaded from memory through `slot_ptr`" in f.message
    assert "`loaded_bounds={'slot_ptr': (lo, hi)}`" in f.message
    (f,) = _on(report, "_split_range_kernel", "int32-offset")
    assert "derived from values loaded from memory through `indptr_ptr`, `splits_ptr`" in f.message  # def order


@pytest.mark.parametrize("kernel", ["_slot_mixed_kernel", "_slot_mixed_late_kernel"])
def test_a_bound_declared_by_one_case_does_not_hide_another_cases_overflow(report, kernel):
    (f,) = _on(report, kernel, "int32-offset")
    assert f.case == {"n": 5} and "loaded from memory" in f.message


def test_ranges_narrow_under_the_branch_condition(report):
    assert _on(report, "_state_shift_kernel", "int32-offset") == []
    assert _on(report, "_state_shift_else_kernel", "int32-offset") == []
    (f,) = _on(report, "_state_shift_wide_kernel", "int32-offset")
    assert f.case == {"seqlen": 1}


def test_ranges_narrow_after_an_early_return_through_min_and_in_elif_chains(report):
    assert _on(report, "_chunk_return_kernel", "int32-offset") == []
    assert _on(report, "_elif_else_kernel", "int32-offset") == []
    (f,) = _on(report, "_chunk_noreturn_kernel", "int32-offset")
    # the extreme is negative: printed with its sign, and said to wrap below -2^31
    assert "can reach -" in f.message and "below the int32 limit of -2,147,483,648, where it wraps" in f.message


def test_store_then_load_disjoint_halves_are_not_flagged(report):
    assert _on(report, "_halves_kernel") == []


def _line_after(kernel: str, text: str) -> int:
    """1-based line, in the case file that defines ``kernel``, of the first line holding ``text`` after its def."""
    for path in sorted(CASES.glob("*.py")):
        lines = path.read_text().splitlines()
        start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith(f"def {kernel}(")), None)
        if start is not None:
            return next(i for i in range(start, len(lines)) if text in lines[i]) + 1
    raise AssertionError(f"no case file defines {kernel}")


def test_store_then_load_across_loop_iterations(report):
    (f,) = _on(report, "_loop_reload_kernel", "store-then-load")
    # the loop's own line (a closing `} loc(...)` was misread: the kernel's def line was named)
    assert f"next iteration of the loop at line {_line_after('_loop_reload_kernel', 'for i in')}" in f.message
    assert _on(report, "_loop_reload_barrier_kernel") == []
    # each iteration works on its own row
    assert _on(report, "_per_iteration_rows_kernel") == []
    # a pointer carried by a while loop is followed back to its argument as one carried by a for loop is
    (f,) = _on(report, "_while_carried_kernel", "store-then-load")
    assert f"next iteration of the loop at line {_line_after('_while_carried_kernel', 'while i')}" in f.message


def test_branches_on_a_condition_the_loop_recomputes_meet_across_iterations(report):
    (f,) = _on(report, "_parity_kernel", "store-then-load")
    assert "next iteration of the loop" in f.message
    (g,) = _on(report, "_parity_kernel", "load-then-store")
    assert "previous iteration of the loop" in g.message


def test_store_then_load_in_exclusive_branches_is_not_flagged(report):
    assert _on(report, "_branches_kernel", "store-then-load") == []
    # a runtime flag alternating between 0 and 1 is a recompile, though
    (f,) = _on(report, "_branches_kernel", "recompile")
    assert "`flag`" in f.message


def test_a_store_before_an_early_return_is_not_followed_by_the_loads_after_it(report):
    assert _on(report, "_early_return_kernel", "store-then-load") == []
    (f,) = _on(report, "_no_return_kernel", "store-then-load")
    assert f.line == _line_after("_no_return_kernel", "tl.store(x_ptr + offs, tl.load(")


def test_store_then_load_through_aliased_arguments(report):
    fs = _on(report, "_copy_kernel", "store-then-load")
    assert len(fs) == 1 and fs[0].case == {"inplace": 1}
    assert "whose view shares bytes with `dst_ptr`'s" in fs[0].message
    assert _on(report, "_disjoint_halves_kernel", "store-then-load") == []


def test_views_of_one_storage_alias_only_where_their_bytes_meet(report):
    # q and k as column slices of one fused projection share no byte; a buffer and itself shifted by one column do
    (f,) = _on(report, "_rows_kernel", "store-then-load")
    assert f.case == {"layout": "shifted_by_one_column"}
    assert f.line == _line_after("_rows_kernel", "y = tl.load(")
    assert "`a_ptr[0, 1]` is `b_ptr[0, 0]`" in f.message
    assert "`a_ptr` [16, 128] with strides (768, 1)" in f.message


def test_load_then_store_through_another_row_mapping(report):
    # the state roll of SGLang's causal conv1d update before sgl-project/sglang#16899 restored its barrier
    fs = [f for f in _on(report, "_state_roll_kernel", "load-then-store")]
    (f,) = fs
    assert f.line == _line_after("_state_roll_kernel", "tl.store(state_ptr")
    assert f"load at line {_line_after('_state_roll_kernel', 'old = tl.load(')}" in f.message
    assert "tl.debug_barrier()" in f.fix
    assert _on(report, "_state_roll_fixed_kernel", "load-then-store") == []
    (t,) = _on(report, "_transpose_inplace_kernel", "load-then-store")
    assert _on(report, "_flag_branches_kernel") == []


def test_load_compute_store_of_one_element_per_lane_is_not_reported(report):
    assert _on(report, "_scale_inplace_kernel") == []
    # the same lane mapping shifted by a uniform row: two lanes never meet, a lane meeting itself is one thread
    assert _on(report, "_ring_row_kernel", "load-then-store") == []
    (f,) = _on(report, "_shift_left_kernel", "load-then-store")
    # several lanes, one element: a broadcast axis, a loaded index, offs // 2
    (g,) = _on(report, "_broadcast_rows_kernel", "load-then-store")
    (p,) = _on(report, "_pairs_kernel", "load-then-store")
    assert "several lanes (threads) one element" in p.message and "another index mapping" not in p.message
    # one pointer expression and one mask: lanes meet only where loaded indices repeat, a lost update that no
    # barrier fixes (a non-atomic histogram); not an ordering bug
    assert _on(report, "_histogram_kernel", "load-then-store") == []
    # ... but under another mask the lanes that store are not those that load
    (m,) = _on(report, "_gather_other_mask_kernel", "load-then-store")
    assert "through the same pointer expression under another mask" in m.message


def test_a_scalar_reduction_orders_memory_only_with_more_than_one_warp(report):
    assert _on(report, "_two_pass_kernel") == []
    (g,) = _on(report, "_reverse_after_small_sum_kernel", "store-then-load")
    (f,) = _on(report, "_two_pass_one_warp_kernel", "load-then-store")
    assert f"load at line {_line_after('_two_pass_one_warp_kernel', 'first = tl.load(')}" in f.message


def test_a_reduction_orders_memory_where_its_layout_spreads_the_axis_over_warps(report):
    # read in the TTGIR: the row sums of a 2 x 512 tile combine 4 warps (a CTA barrier), those of 4 x 32 stay in one
    (f,) = _on(report, "_rows_flipped_kernel", "load-then-store")
    assert f.case == {"rows": 4} and f.count == 1
    (g,) = _on(report, "_rows_flipped_max_kernel", "load-then-store")  # the maxima of the loaded tile itself
    assert g.case == {"rows": 4} and g.count == 1
    (a,) = _on(report, "_rows_flipped_any_kernel", "load-then-store")  # a reduction of a comparison
    assert a.case == {"rows": 4} and a.count == 1
    # a reduction (or a barrier) in the branch an early return ends orders nothing on the path that skips it
    (e,) = _on(report, "_early_return_sum_kernel", "load-then-store")
    (b,) = _on(report, "_early_return_barrier_kernel", "load-then-store")
    # ... but not for a load the pipeliner issues iterations ahead of the barrier (sm_90 PTX: cp.async of block
    # i + 1 before block i's store, with three stages; a plain load after it with one)
    (h,) = _on(report, "_blocks_ahead_kernel", "store-then-load")
    assert h.case == {"stages": 3} and h.count == 1


def test_pointers_a_loop_advances_are_followed_across_iterations(report):
    # rows one stride apart never meet (Liger's in-place RMSNorm backward); one element apart they do
    assert _on(report, "_rows_backward_kernel") == []
    (f,) = _on(report, "_sliding_kernel", "store-then-load")
    assert "next iteration of the loop" in f.message


def test_a_mask_bounds_an_integer_only_along_the_axis_it_masks(report):
    # masking the columns says nothing of the rows laid from the same arange: the race is there for one column
    (f,) = _on(report, "_square_tile_shift_kernel", "load-then-store")
    assert f.case == {"ncols": 1}
    assert _on(report, "_masked_column_halves_kernel") == []


def test_loop_counters_are_followed_as_k_times_step(report):
    # a row index derived from the counter (i // 2) repeats across iterations: the next one reads what this stored
    (f,) = _on(report, "_row_index_loop_kernel", "store-then-load")
    assert "next iteration of the loop" in f.message
    # two loops over the same column tiles (off = k * BN): an element is read and rewritten by one lane
    assert _on(report, "_two_pass_tiles_kernel") == []
    # a tensor descriptor's tile moved by k * STEP: a whole tile per step never meets the next, half a tile does
    (f,) = _on(report, "_desc_tiles_kernel", "store-then-load")
    assert f.case == {"step": 64} and "next iteration of the loop" in f.message


def test_division_of_a_value_that_can_be_negative(report):
    (f,) = _on(report, "_ring_negmod_kernel", "int-division-sign")
    assert f.severity == "warning" and f.case == {"pos": 0}
    assert f.message.startswith(
        "`(pos - window) % CAP` divides like C, not like Python, and `pos - window` can be "
        "as low as -5: -5 % 8 is -5 in the kernel, 3 in Python"
    )
    assert _on(report, "_ring_kernel", "int-division-sign") == []
    fs = _on(report, "_slot_unguarded_kernel", "int-division-sign")
    assert {f.tag for f in fs} == {"//", "%"} and all("`loaded_bounds`" in f.message for f in fs)
    # an unknown loaded integer is taken as >= 0: no warning without a declared negative bound
    assert _on(report, "_unknown_slot_kernel") == [] and _on(report, "_unknown_cdiv_kernel") == []
    # a guard, a reload after it, a where, a mask, and a bound the case declares all keep it quiet
    assert _on(report, "_slot_guarded_kernel", "int-division-sign") == []
    assert all(f.case != {"n": 4} for f in fs)
    assert _on(report, "_tiles_kernel", "int-division-sign") == []
    # a stage index from a loop's iterations done: only the loop that can start below lo is flagged
    (st,) = _on(report, "_ring_stages_kernel", "int-division-sign")
    assert st.line == _line_after("_ring_stages_kernel", "for j in range(tl.load(lo_ptr + 2), hi):") + 1
    lines = {f.line for f in _on(report, "_loop_count_kernel", "int-division-sign")}
    assert lines == {
        _line_after("_loop_count_kernel", "(seqlen - 1) // BLOCK + 1"),
        _line_after("_loop_count_kernel", "seqlen % W"),
    }
    assert _on(report, "_reload_kernel", "int-division-sign") == []
    (r,) = _on(report, "_reload_rewritten_kernel", "int-division-sign")
    (cd,) = _on(report, "_countdown_kernel", "int-division-sign")
    # a division inlined from tl.cdiv is quoted as the call, never by IR names
    (c,) = _on(report, "_cdiv_kernel", "int-division-sign")
    assert c.message.startswith("`tl.cdiv(n, SPLITS)` divides like C, not like Python, and `n` can be as low as -64")


def test_a_mask_on_what_the_dividend_is_shifted_from_guards_it(report):
    # offs > 0 and offs >= 1 make offs - 1 >= 0 where the load reads
    assert _on(report, "_prev_half_kernel") == []
    # a mask on the quotient (-1 // 2 is 0: not masked off), or one that lets offs - 1 be -1
    for k in ("_prev_half_quotient_mask_kernel", "_prev_half_loose_mask_kernel"):
        (f,) = _on(report, k, "int-division-sign")
        assert f.message.startswith("`(offs - 1) // 2` divides like C") and "-1 // 2 is 0 in the kernel" in f.message


def test_a_difference_of_offsets_is_a_length(report):
    # undeclared, the difference of two entries of one array (larger index minus smaller) is a length, as cumulative
    # offsets are in every engine (issue 40: SGLang's decode attention, vLLM's unified attention)
    assert _on(report, "_varlen_cdiv_kernel", "int-division-sign") == []
    # the smaller index minus the larger is <= 0, declared or not, and still reported
    (g,) = _on(report, "_varlen_reversed_kernel", "int-division-sign")
    assert "nondecreasing" not in g.message


def test_loop_accumulator_in_fp16_is_flagged_but_fp16_max_is_not(report):
    (f,) = _on(report, "_acc_f16_kernel", "low-precision-accumulation")
    assert "loop accumulates" in f.message and "float16" in f.message
    assert _on(report, "_max_f16_kernel") == []


def test_pointer_alignment_split_suggests_do_not_specialize_on_alignment(report):
    (f,) = _on(report, "_aligned_kernel", "recompile")
    assert "`x_ptr`" in f.message and "not 16-byte aligned" in f.message
    assert "do_not_specialize_on_alignment=['x_ptr']" in f.fix


def test_int32_to_int64_argument_split_is_not_a_recompile_finding(report):
    assert _on(report, "_width_kernel") == []


def test_grid_limits_per_dimension(report):
    fs = {f.tag: f for f in _on(report, "_grid_kernel", "grid-limit")}
    assert set(fs) == {"grid[0]", "grid[2]"}
    assert fs["grid[0]"].case == {"grid": (2**31, 1, 1)} and "2,147,483,648" in fs["grid[0]"].message
    assert fs["grid[2]"].case == {"grid": (1, 1, 65_536)}


def test_heuristics_and_warmup_launches_are_captured(report):
    k = {d["kernel"]: d for d in report.kernels}
    # BLOCK from the heuristic: 128 for n=100, 1024 for n=1000
    assert k["_heuristic_kernel"]["launches"] == 2 and k["_heuristic_kernel"]["compiles"] == 2
    # warmup compiles without running; its grid is still checked
    assert k["_warmup_kernel"]["compiles"] == 1
    (f,) = _on(report, "_warmup_kernel", "grid-limit")
    assert "grid[1] = 70,000" in f.message


def test_recompile_compares_launches_within_a_sweep_of_per_call_sizes(report):
    (f,) = _on(report, "_sweep_default_kernel", "recompile")
    assert "`n`" in f.message and "`heads`" not in f.message
    # once for each of the two sweeps (heads 16 and 17), reported as one finding seen twice
    assert f.count == 2
    (g,) = _on(report, "_sweep_named_kernel", "recompile")
    assert "`heads`" in g.message and "`n`" not in g.message and g.count == 2


def test_recompile_counts_constexprs_and_options_a_per_call_size_chooses(report):
    (f,) = _on(report, "_bucketed_kernel", "recompile")
    # 1, 2, 4, 8, 16, 32, 64: one compile per power of two, for the forward and the backward alike
    assert "compiles 7 times" in f.message and "constexpr `BLOCK_R` (7 values: 1, 2, 4, 8, …)" in f.message
    assert "#3 num_reqs=3 (BLOCK_R=4)" in f.message and "BACKWARD" not in f.message
    assert f.count == 2  # the forward's sweep and the backward's, merged
    assert "`BLOCK_R` a function of the model's sizes" in f.fix
    (g,) = _on(report, "_warps_kernel", "recompile")
    assert "compiles 2 times" in g.message and "launch option num_warps (4, 8)" in g.message
    assert "#2 num_reqs=16, 17, 64 (num_warps=8)" in g.message
    # any option that enters the compile, not just the usual four
    (o,) = _on(report, "_fusion_kernel", "recompile")
    assert "split by launch option enable_fp_fusion (False, True)" in o.message
    assert "#2 num_reqs=17, 64 (enable_fp_fusion=True)" in o.message
    # a heuristic's constexpr is the same churn
    (h,) = _on(report, "_heuristic_kernel", "recompile")
    assert "constexpr `BLOCK` (2 values: 128, 1024)" in h.message


def test_case_rejects_a_sweep_that_names_no_parameter():
    import tritonkit

    with pytest.raises(ValueError, match="sweep names"):
        tritonkit.case(num_tokens=[1, 2], sweep=["num_seqs"])(lambda num_tokens: None)


def test_a_packed_key_read_back_through_a_shift_is_not_an_offset_overflow(report):
    # Liger-Kernel's router packs (expert << 16 | lane) in uint32 and sorts it; the expert comes back by >> 16: the
    # bits the shift drops are dropped by design. The same shift used as the offset, and a wrapping product that a
    # right shift only halves, are still overflows
    assert _on(report, "_packed_keys_kernel", "int32-offset") == []
    (f,) = _on(report, "_packed_key_as_offset_kernel", "int32-offset")
    assert f.message.startswith("`ids << 16` is computed in uint32")
    (g,) = _on(report, "_wrap_then_shift_kernel", "int32-offset")
    assert g.message.startswith("`ids * stride` is computed in uint32")


def test_an_offset_widened_after_it_wrapped_is_reported(report):
    # (pid * stride).to(tl.int64): the int32 product wrapped before the cast; casting pid first is the fix
    (f,) = _on(report, "_widened_late_kernel", "int32-offset")
    assert f.case == {"rows": 2**20} and "before it is widened to int64 (too late" in f.message
    assert "`tl.program_id(0).to(tl.int64) * stride`" in f.fix
    assert _on(report, "_widened_early_kernel", "int32-offset") == []


def test_a_load_that_rereads_its_own_threads_store_is_not_a_race(report):
    # the same pointer tile and mask, one layout holding each element once: each thread reads back its own store
    assert _on(report, "_reread_own_kernel") == []
    # the same code where warps replicate the tile, the same pointer in two layouts (a sliced one, a wider vector),
    # or a transposed re-read: another thread may store what a thread loads
    for k in ("_reread_replicated_kernel", "_reread_row_sums_kernel", "_reread_mixed_width_kernel"):
        (f,) = _on(report, k, "store-then-load")
        assert "the same pointer" in f.message and f.line == _line_after(k, "y = tl.load(")
    (t,) = _on(report, "_reread_transposed_kernel", "store-then-load")
    assert t.line == _line_after("_reread_transposed_kernel", "y = tl.load(")

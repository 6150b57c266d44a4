"""The checker on kernels modeled on real upstream Triton kernels (tests/check/realworld, SOURCES.md there): each
historical bug is found on the line the upstream fix changed, its fixed twin and the clean upstream patterns stay
silent except for the true findings upstream kept, which are marked too.

`pytest -s tests/check/test_realworld.py -k table` (or `python tests/check/test_realworld.py`) prints the recall /
false-alarm table.
"""

import re
from pathlib import Path

import pytest

from tritonkit.check import Options, run_check

REALWORLD = Path(__file__).parent / "realworld"
FILES = sorted(p.name for p in REALWORLD.glob("*.py"))
MARK = re.compile(r"#\s*expect:\s*([\w-]+)")

# kernel -> (role, seeded, known). role: "buggy" (the pattern before the upstream fix), "fixed" (its twin, the fix
# as upstream made it), "clean" (a current upstream kernel). seeded: the rules of the historical bug (buggy kernels
# only). known: true findings upstream kept (SOURCES.md says why); not false alarms, not bugs seeded.
KERNELS = {
    "_decode_split_kv_i32page_kernel": ("buggy", {"int32-offset"}, {"low-precision-accumulation"}),
    "_decode_split_kv_kernel": ("fixed", set(), {"low-precision-accumulation"}),
    "_mla_prologue_token_major_y_kernel": ("buggy", {"grid-limit"}, set()),
    "_mla_prologue_kernel": ("fixed", set(), set()),
    "_q_pack_token_major_y_kernel": ("buggy", {"grid-limit", "int32-offset"}, set()),
    "_q_pack_kernel": ("fixed", set(), set()),
    "_gather_block_tables_specialized_kernel": ("buggy", {"recompile"}, set()),
    "_gather_block_tables_kernel": ("fixed", set(), set()),
    "_slot_mapping_kernel": ("clean", set(), set()),
    "_conv1d_update_nobarrier_kernel": ("buggy", {"load-then-store"}, {"recompile"}),
    "_conv1d_update_kernel": ("fixed", set(), {"recompile"}),
    "_alloc_extend_tile_constexpr_kernel": ("buggy", {"recompile"}, set()),
    "_alloc_extend_kernel": ("fixed", set(), {"recompile"}),
    "_swiglu_fwd_i32row_kernel": ("buggy", {"int32-offset"}, set()),
    "_swiglu_bwd_i32row_kernel": ("buggy", {"int32-offset"}, set()),
    "_swiglu_fwd_kernel": ("fixed", set(), set()),
    "_swiglu_bwd_kernel": ("fixed", set(), set()),
    "_rms_norm_fwd_i32row_kernel": ("buggy", {"int32-offset"}, set()),
    "_rms_norm_bwd_i32row_kernel": ("buggy", {"int32-offset"}, {"recompile"}),
    "_rms_norm_fwd_kernel": ("fixed", set(), set()),
    "_rms_norm_bwd_kernel": ("fixed", set(), {"recompile"}),
    "_mrope_fwd_i32row_kernel": ("buggy", {"int32-offset"}, {"recompile"}),
    "_mrope_fwd_kernel": ("fixed", set(), {"recompile"}),
    "_chunk_kkt_i32bh_kernel": ("buggy", {"int32-offset"}, {"autotune-cost"}),
    "_chunk_kkt_kernel": ("fixed", set(), {"autotune-cost"}),
    "_ep_gather_i32row_kernel": ("buggy", {"int32-offset"}, set()),
    "_ep_gather_kernel": ("fixed", set(), set()),
    "_slot_write_kernel": ("clean", set(), set()),
    "_merge_states_kernel": ("clean", set(), {"recompile"}),
    "_cross_entropy_fwd_bwd_kernel": ("clean", set(), {"recompile"}),
    "_conv1d_ring_negmod_kernel": ("buggy", {"int-division-sign"}, set()),
    "_conv1d_ring_kernel": ("fixed", set(), set()),
    "_conv1d_varlen_state_kernel": ("clean", set(), set()),
    "_conv1d_chunk_state_kernel": ("clean", set(), set()),
    "_lora_expand_kernel": ("clean", set(), set()),
    "_decode_stage1_kernel": ("clean", set(), set()),
    "_decode_stage2_kernel": ("clean", set(), set()),
    # issue 40: upstream kernels a newcomer checked, four false-alarm classes and the uint32 miss
    "_sgl_decode_stage1_kernel": ("clean", set(), set()),
    "_sgl_decode_stage2_kernel": ("clean", set(), set()),
    "_unified_attention_kernel": ("clean", set(), {"recompile"}),
    "_prefix_prefill_kernel": ("clean", set(), set()),
    "_silu_and_mul_inplace_kernel": ("clean", set(), {"recompile"}),
    "_token_gather_u32_kernel": ("buggy", {"int32-offset"}, {"autotune-cost"}),
    "_token_gather_kernel": ("fixed", set(), {"autotune-cost"}),
}


@pytest.fixture(scope="module")
def report():
    return run_check([str(REALWORLD)], Options(disk_cache=False))


def marked_lines() -> set[tuple[str, int, str]]:
    """(file name, line, rule) of every `# expect: <rule>` mark."""
    out = set()
    for f in FILES:
        for i, line in enumerate((REALWORLD / f).read_text().splitlines(), 1):
            m = MARK.search(line)
            if m:
                out.add((f, i, m.group(1)))
    return out


def found_lines(report) -> set[tuple[str, int, str]]:
    return {(Path(f.file).name, f.line, f.rule) for f in report.findings}


def recall_table(report) -> str:
    """Per kernel: role, bugs seeded / found, known findings, findings on no marked line (false alarms on fixed and
    clean kernels), marked lines missed; then the totals."""
    found, marks = found_lines(report), marked_lines()
    file_of = {k["kernel"]: Path(k["file"]).name for k in report.kernels}
    rows = [f"{'file':<22} {'kernel':<40} {'role':<6} {'bugs':<5} {'known':<5} {'unmarked findings':<24} missed lines"]
    seeded = hit = alarms = extra_on_buggy = 0
    for kernel, (role, bugs, known) in KERNELS.items():
        fs = [f for f in report.findings if f.kernel == kernel]
        on_marks = {f.rule for f in fs if (Path(f.file).name, f.line, f.rule) in marks}
        got = bugs & on_marks
        unmarked = sorted({f"{f.rule}@{f.line}" for f in fs if (Path(f.file).name, f.line, f.rule) not in marks})
        seeded += len(bugs)
        hit += len(got)
        if role == "buggy":
            extra_on_buggy += len(unmarked)
        else:
            alarms += len(unmarked)
        fname = file_of.get(kernel, "(not launched)")
        missed = sorted(f"{r}@{ln}" for (fl, ln, r) in marks - found if fl == fname and r in bugs | known)
        rows.append(
            f"{fname:<22} {kernel:<40} {role:<6} {f'{len(got)}/{len(bugs)}':<5} "
            f"{f'{len(known & on_marks)}/{len(known)}':<5} {', '.join(unmarked) or '-':<24} "
            f"{', '.join(missed) or '-'}"
        )
    lines_hit = len(marks & found)
    rows.append("")
    rows.append(
        f"recall: {hit}/{seeded} bugs found (marked lines: {lines_hit}/{len(marks)} reported); "
        f"false alarms on fixed/clean kernels: {alarms}; unmarked findings on buggy kernels: {extra_on_buggy}; "
        f"{report.stats.get('compiles')} compiles in {report.stats.get('seconds', 0):.1f} s"
    )
    return "\n".join(rows)


def test_no_fatal_problem_and_every_kernel_ran(report):
    assert not [p for p in report.problems if p.fatal], report.problems
    assert set(KERNELS) == {k["kernel"] for k in report.kernels}


def test_every_marked_rule_exists():
    from tritonkit.check.rules import all_rules

    assert {r for _f, _l, r in marked_lines()} <= set(all_rules())


def test_findings_point_at_the_marked_lines(report):
    found, marks = found_lines(report), marked_lines()
    assert found - marks == set(), "findings on no marked line"
    assert marks - found == set(), "marked lines with no finding"


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_rules_fire_exactly_as_expected(report, kernel):
    _role, bugs, known = KERNELS[kernel]
    assert {f.rule for f in report.findings if f.kernel == kernel} == bugs | known


def test_recall_table(report):
    table = recall_table(report)
    print("\n" + table)
    assert "recall:" in table


if __name__ == "__main__":
    print(recall_table(run_check([str(REALWORLD)], Options(disk_cache=False))))


def test_the_text_report_fits_120_columns(report):
    # findings lines reached 262-413 columns: messages, reasons, fixes and long source lines wrap, nothing is cut
    from tritonkit.check.report import to_text

    text = to_text(report)
    assert not [ln for ln in text.splitlines() if len(ln) > 120]

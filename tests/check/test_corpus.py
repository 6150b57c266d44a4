"""Every rule finds its seeded bug on the marked line and is silent on the fixed twin.

Each rule's fixtures sit in ``tests/check/rules/<module>/``, named like its module in ``check/rules/``: files that
each hold a seeded kernel and its fixed twin. ``corpus/elementwise.py`` holds ordinary kernels no rule may flag."""

import re
from pathlib import Path

import pytest

from tritonkit.check import Options, run_check

HERE = Path(__file__).parent
RULES = HERE / "rules"
FILES = [*sorted(RULES.glob("*/*.py")), HERE / "corpus" / "elementwise.py"]

# kernel -> the rules that must fire on it (and no other); the twins and the ordinary kernels expect none
EXPECTED = {
    "_kv_write_i32_kernel": {"int32-offset"},
    "_kv_write_kernel": set(),
    "_paged_decode_bt32_kernel": {"int32-offset"},
    "_paged_decode_kernel": set(),
    "_paged_decode_f16sum_kernel": {"low-precision-accumulation"},
    "_paged_decode_f32sum_kernel": set(),
    "_qk_norm_rope_racy_kernel": {"store-then-load"},
    "_qk_norm_rope_kernel": set(),
    "_rope_scaled_racy_kernel": {"load-then-store"},
    "_rope_scaled_kernel": set(),
    "_rope_head_major_kernel": {"grid-limit"},
    "_rope_kernel": set(),
    "_moe_count_specialized_kernel": {"recompile"},
    "_moe_count_kernel": set(),
    "_moe_gather_i32_kernel": {"int32-offset"},
    "_moe_gather_kernel": set(),
    "_moe_gemm_f16acc_kernel": {"low-precision-accumulation"},
    "_moe_gemm_kernel": set(),
    "_moe_gemm_autotuned_kernel": {"autotune-cost"},
    "_moe_gemm_one_config_kernel": set(),
    "_silu_and_mul_flat_kernel": set(),
    "_silu_and_mul_2d_kernel": set(),
    "_rms_norm_rows_kernel": set(),
    "_window_evict_negmod_kernel": {"int-division-sign"},
    "_window_evict_kernel": set(),
}

# seeded kernel -> its fixed twin (the same kernel with the bug fixed)
TWINS = {
    "_kv_write_i32_kernel": "_kv_write_kernel",
    "_paged_decode_bt32_kernel": "_paged_decode_kernel",
    "_paged_decode_f16sum_kernel": "_paged_decode_f32sum_kernel",
    "_qk_norm_rope_racy_kernel": "_qk_norm_rope_kernel",
    "_rope_scaled_racy_kernel": "_rope_scaled_kernel",
    "_rope_head_major_kernel": "_rope_kernel",
    "_moe_count_specialized_kernel": "_moe_count_kernel",
    "_moe_gather_i32_kernel": "_moe_gather_kernel",
    "_moe_gemm_f16acc_kernel": "_moe_gemm_kernel",
    "_moe_gemm_autotuned_kernel": "_moe_gemm_one_config_kernel",
    "_window_evict_negmod_kernel": "_window_evict_kernel",
}


@pytest.fixture(scope="module")
def report():
    return run_check([str(f) for f in FILES], Options(disk_cache=False))


def _marked_lines(files=FILES):
    """(file relative to tests/check, line, rule) of every `# seeded bug: <rule>` marker."""
    out = set()
    for f in files:
        for i, line in enumerate(f.read_text().splitlines(), 1):
            m = re.search(r"# seeded bug: ([\w-]+)", line)
            if m:
                out.add((str(f.relative_to(HERE)), i, m.group(1)))
    return out


def _defined_in(folder: Path) -> set[str]:
    """The kernels the files of ``folder`` define."""
    return {m for f in folder.glob("*.py") for m in re.findall(r"^def (\w+)\(", f.read_text(), re.M)}


def test_every_case_ran_and_every_kernel_compiled(report):
    assert not [p for p in report.problems if p.fatal], report.problems
    launched = {k["kernel"] for k in report.kernels}
    assert set(EXPECTED) <= launched


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_rules_fire_exactly_on_the_seeded_bug(report, kernel):
    fired = {f.rule for f in report.findings if f.kernel == kernel}
    assert fired == EXPECTED[kernel]


def test_findings_point_at_the_marked_lines(report):
    found = {(str(Path(f.file).relative_to(HERE)), f.line, f.rule) for f in report.findings}
    assert found == _marked_lines()


def test_exit_code_is_one_with_errors(report):
    assert report.exit_code() == 1


@pytest.mark.parametrize(
    "kernel,operand",
    [
        ("_kv_write_i32_kernel", "blk"),
        ("_paged_decode_bt32_kernel", "block"),
        ("_moe_gather_i32_kernel", "row[:, None]"),
    ],
)
def test_int32_offset_names_the_operand_to_widen(report, kernel, operand):
    (f,) = [f for f in report.findings if f.kernel == kernel]
    assert f.severity == "error"
    assert f"cast `{operand}` to tl.int64" in f.fix
    assert "int32" in f.message and "2,147,483,647" in f.message


def test_grid_limit_names_dimension_value_and_case(report):
    (f,) = [f for f in report.findings if f.rule == "grid-limit"]
    assert "grid[1] = 70,000" in f.message and "65,535" in f.message
    assert f.case == {"num_tokens": 70_000}


def test_recompile_names_argument_values_and_fix(report):
    (f,) = [f for f in report.findings if f.rule == "recompile"]
    assert f.severity == "warning"
    assert "`num_tokens`" in f.message and "compiles 3 times" in f.message
    assert "1 → equal to 1" in f.message and "17 → not divisible by 16" in f.message
    assert "do_not_specialize=['num_tokens']" in f.fix


def test_store_then_load_names_the_store_line(report):
    fs = [f for f in report.findings if f.rule == "store-then-load"]
    src = (RULES / "store_then_load" / "qk_norm_rope.py").read_text().splitlines()
    store_line = next(i for i, s in enumerate(src, 1) if "tl.store(base + offs, (x * rstd * w)" in s)
    assert len(fs) == 2 and all(f"store at line {store_line}" in f.message for f in fs)
    assert all("tl.debug_barrier()" in f.fix for f in fs)


def test_autotune_cost_counts_configs_times_keys(report):
    (f,) = [f for f in report.findings if f.rule == "autotune-cost"]
    assert f.severity == "info"
    assert "4 configs" in f.message and "2 distinct keys" in f.message
    # every key benchmarks every config; compiles are shared by keys with the same specialization
    assert "8 benchmark runs and 4 compiles" in f.message
    assert re.search(r"One config takes \d+ ms", f.message)


def test_kernel_summary_counts_launches_compiles_and_grid(report):
    k = {d["kernel"]: d for d in report.kernels}
    assert k["_rope_head_major_kernel"]["launches"] == 5
    assert k["_rope_head_major_kernel"]["max_grid"] == [32, 70_000, 1]
    # do_not_specialize keeps the whole num_tokens sweep on one compile
    assert k["_moe_count_kernel"]["compiles"] == 1
    assert k["_moe_count_specialized_kernel"]["compiles"] == 3
    # 4 configs; both (N, K) keys are divisible by 16, so they share a specialization
    assert k["_moe_gemm_autotuned_kernel"]["compiles"] == 4


@pytest.mark.parametrize("rule", sorted(__import__("tritonkit.check.rules", fromlist=["all_rules"]).all_rules()))
def test_every_rule_has_a_page_a_seeded_bug_and_a_fixed_twin_beside_it(rule):
    """CONTRIBUTING's checklist, enforced: a rule registered in check/registry.py without these fails here."""
    from tritonkit.check.rules import all_rules, rule_page

    assert rule_page(rule).startswith(f"# `{rule}`"), f"check/docs/{rule}.md is missing or has no title"
    assert f"`{rule}`" in (HERE.parents[1] / "README.md").read_text(), f"README.md does not list {rule}"
    folder = RULES / all_rules()[rule].__name__.rsplit(".", 1)[1]
    mine = _defined_in(folder)
    seeded = [k for k, rules in EXPECTED.items() if rule in rules and k in mine]
    assert seeded, f"no kernel in {folder.relative_to(HERE)}/ seeds a {rule} bug"
    twins = [TWINS[k] for k in seeded if k in TWINS and EXPECTED[TWINS[k]] == set()]
    assert twins and set(twins) <= mine, f"no fixed twin of the {rule} bug in {folder.relative_to(HERE)}/"
    marks = {r for _f, _l, r in _marked_lines(sorted(folder.glob("*.py")))}
    assert rule in marks, f"no `# seeded bug: {rule}` marker in {folder.relative_to(HERE)}/"


def test_every_fixture_folder_is_a_rule():
    # a folder left behind by a renamed rule would hold fixtures no test reads
    from tritonkit.check.registry import MODULES

    assert {d.name for d in RULES.iterdir() if d.is_dir() and d.name != "__pycache__"} == set(MODULES)

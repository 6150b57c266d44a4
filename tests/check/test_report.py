"""The three output formats and the CLI's options and exit codes."""

import json
from pathlib import Path

import pytest

from tritonkit.check import Options, run_check
from tritonkit.check.cli import main as check_main
from tritonkit.check.report import to_json, to_sarif, to_text

RULES = Path(__file__).parent / "rules"
# three rules' fixtures: store-then-load, load-then-store and grid-limit, each beside its fixed twin
FILES = [
    str(RULES / "store_then_load" / "qk_norm_rope.py"),
    str(RULES / "load_then_store" / "rope_scaled.py"),
    str(RULES / "grid_limit" / "rope.py"),
]
KV_WRITE = RULES / "int32_offset" / "kv_cache_write.py"


@pytest.fixture(scope="module")
def report():
    return run_check(FILES, Options(disk_cache=False))


def test_json_schema(report):
    d = json.loads(to_json(report))
    assert d["findings"] and d["kernels"]
    for f in d["findings"]:
        assert {"rule", "severity", "kernel", "file", "line", "message", "case"} <= set(f)
        assert isinstance(f["line"], int) and isinstance(f["case"], dict)
    for k in d["kernels"]:
        assert {"kernel", "file", "launches", "compiles", "max_grid"} <= set(k)
        assert len(k["max_grid"]) == 3
    assert {f["rule"] for f in d["findings"]} == {"store-then-load", "load-then-store", "grid-limit"}


def test_sarif_2_1_0(report):
    d = json.loads(to_sarif(report))
    assert d["version"] == "2.1.0" and "sarif-2.1.0" in d["$schema"]
    (run,) = d["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [
        "grid-limit",
        "int32-offset",
        "store-then-load",
        "load-then-store",
        "recompile",
        "int-division-sign",
        "low-precision-accumulation",
        "autotune-cost",
    ]
    assert {r["defaultConfiguration"]["level"] for r in rules} == {"error", "warning", "note"}
    for res in run["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note") and res["message"]["text"]
        (loc,) = res["locations"]
        phys = loc["physicalLocation"]
        assert phys["artifactLocation"]["uri"].endswith(("qk_norm_rope.py", "rope_scaled.py", "/rope.py"))
        assert phys["region"]["startLine"] >= 1
    assert run["invocations"][0]["executionSuccessful"] is True


def test_text_block_has_location_source_rule_why_fix_and_summary(report):
    text = to_text(report)
    grid = next(f for f in report.findings if f.rule == "grid-limit")
    assert f"grid_limit/rope.py:{grid.line}: error [grid-limit] in _rope_head_major_kernel" in text
    assert "_rope_head_major_kernel[grid](q, pos, cs" in text  # the source line
    assert "why: CUDA caps gridDim.y" in text and "fix: put the dimension" in text
    assert "case: num_tokens=70000" in text and "docs: tritonkit check --explain grid-limit" in text
    # the summary closes the report, wrapped at 120 columns like every line of it
    summary = " ".join(text.rstrip().split("\n\n")[-1].split())
    assert summary.startswith("tritonkit check: 5 errors, 0 warnings, 0 infos in 6 kernels")
    assert max(map(len, text.splitlines())) <= 120


def test_every_format_states_the_triton_and_the_target_it_read(report):
    # findings are read from the IR this Triton compiled for this GPU: each format says which
    import triton

    assert report.stats["triton"] == triton.__version__ and report.stats["arch"] == "sm_90"
    summary = " ".join(to_text(report).rstrip().split("\n\n")[-1].split())
    assert summary.endswith(f"for sm_90 with Triton {triton.__version__} in {report.stats['seconds']:.1f} s")
    assert {k: json.loads(to_json(report))["stats"][k] for k in ("triton", "arch")} == {
        "triton": triton.__version__,
        "arch": "sm_90",
    }
    (run,) = json.loads(to_sarif(report))["runs"]
    assert run["tool"]["extensions"] == [
        {"name": "triton", "version": triton.__version__, "properties": {"target": "sm_90"}}
    ]


def test_cli_formats_rule_selection_and_exit_codes(tmp_path, capsys):
    assert check_main([*FILES, "--format", "json", "--rule", "grid-limit"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert {f["rule"] for f in d["findings"]} == {"grid-limit"}
    # a rule that finds nothing here: exit 0
    assert check_main([*FILES, "--rule", "recompile", "--rule", "int32-offset"]) == 0
    out = tmp_path / "r.sarif"
    assert check_main([*FILES, "--format", "sarif", "-o", str(out)]) == 1
    assert json.loads(out.read_text())["version"] == "2.1.0"


@pytest.mark.parametrize("arch", ["sm_80", "sm_100"])
def test_other_archs(arch):
    rep = run_check([str(KV_WRITE)], Options(arch=arch, disk_cache=False))
    assert rep.stats["arch"] == arch
    assert [(f.rule, f.kernel) for f in rep.findings] == [("int32-offset", "_kv_write_i32_kernel")]


def test_disk_cache_reuses_compiled_ir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONKIT_CACHE_DIR", str(tmp_path))
    first = run_check([str(KV_WRITE)], Options())
    again = run_check([str(KV_WRITE)], Options())
    assert first.stats["compiled_now"] == 2 and again.stats["compiled_now"] == 0
    assert [f.as_json() for f in first.findings] == [f.as_json() for f in again.findings]


def test_the_same_kernel_source_in_two_checkouts_is_reported_at_each(tmp_path, monkeypatch):
    # two checkouts of one package (same module name, same source, same line): the IR cache keyed by source alone
    # reported the second checkout's finding at the first checkout's path
    import sys

    monkeypatch.setenv("TRITONKIT_CACHE_DIR", str(tmp_path / "cache"))
    src = KV_WRITE.read_text()
    for name in ("a", "b"):
        (tmp_path / name / "kvpkg").mkdir(parents=True)
        (tmp_path / name / "kvpkg" / "__init__.py").write_text("")
        (tmp_path / name / "kvpkg" / "kv.py").write_text(src)
    seen = []
    for name in ("a", "b", "a"):
        for m in [m for m in sys.modules if m.startswith("kvpkg")]:
            monkeypatch.delitem(sys.modules, m)
        monkeypatch.setattr(sys, "path", [p for p in sys.path if not p.startswith(str(tmp_path))])
        rep = run_check([str(tmp_path / name / "kvpkg" / "kv.py")], Options())
        (f,) = rep.findings
        seen.append(Path(f.file).parts[-3])
    assert seen == ["a", "b", "a"]


def test_every_rule_ships_its_page_and_explain_prints_it(capsys):
    from tritonkit.check.rules import all_rules, rule_page

    for rid, mod in all_rules().items():
        page = rule_page(rid)
        assert page.startswith(f"# `{rid}` ({mod.RULE.severity})") and len(page) > 500
    assert check_main(["--explain", "int-division-sign"]) == 0
    assert capsys.readouterr().out.startswith("# `int-division-sign` (warning)")
    assert check_main(["--explain", "no-such-rule"]) == 2
    assert "unknown rule 'no-such-rule'" in capsys.readouterr().err


def test_help_lists_every_rule(capsys):
    from tritonkit.check.cli import RULE_IDS
    from tritonkit.check.rules import all_rules

    assert RULE_IDS == tuple(all_rules())
    with pytest.raises(SystemExit):
        check_main(["--help"])
    assert "load-then-store" in " ".join(capsys.readouterr().out.split())


def test_sarif_rules_carry_their_page(report):
    rules = json.loads(to_sarif(report))["runs"][0]["tool"]["driver"]["rules"]
    assert all(r["help"]["markdown"].startswith(f"# `{r['id']}`") for r in rules)

"""Adopting the checker: in-source suppressions, a baseline keyed by code rather than line numbers."""

import json
import textwrap

import pytest

from tritonkit.check import Options, run_check
from tritonkit.check.cli import main as check_main

KERNELS = """
import torch
import triton
import triton.language as tl
import tritonkit


@triton.jit
def _rows_kernel(x_ptr, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    tl.store(x_ptr + row * stride + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32)){ROW_NOTE}


@triton.jit
def _ring_kernel(x_ptr, pos, CAP: tl.constexpr, BLOCK: tl.constexpr):
    slot = (pos - 3) % CAP{RING_NOTE}
    tl.store(x_ptr + slot * BLOCK + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))
{EXTRA}

@tritonkit.case(rows=[70_000])
def rows(rows):
    _rows_kernel[(rows,)](torch.empty(rows * 40_000, device="meta"), 40_000, BLOCK=16)
    _ring_kernel[(1,)](torch.empty(8 * 16, device="meta"), 0, CAP=8, BLOCK=16)
"""

NEW_BUG = """

@triton.jit
def _new_kernel(x_ptr, stride, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.program_id(0) * stride + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))


@tritonkit.case(rows=[70_000])
def new(rows):
    _new_kernel[(rows,)](torch.empty(rows * 40_000, device="meta"), 40_000, BLOCK=16)
"""


def _write(path, row_note="", ring_note="", extra="", pad=0):
    src = KERNELS.replace("{ROW_NOTE}", row_note).replace("{RING_NOTE}", ring_note).replace("{EXTRA}", extra)
    path.write_text("\n" * pad + textwrap.dedent(src))
    return str(path)


def test_an_ignore_comment_suppresses_its_rule_on_its_line_and_keeps_the_finding(tmp_path, capsys):
    f = _write(
        tmp_path / "sup.py",
        row_note="  # tritonkit: ignore[int32-offset] rows stay below 50,000",
        ring_note="  # tritonkit: ignore[grid-limit] names another rule",
    )
    rep = run_check([f], Options(disk_cache=False))
    by_rule = {x.rule: x for x in rep.findings}
    assert by_rule["int32-offset"].suppressed == "rows stay below 50,000"
    assert by_rule["int-division-sign"].suppressed is None and by_rule["int-division-sign"].active
    assert rep.exit_code() == 1  # the division warning is still active
    assert check_main([f, "--rule", "int32-offset"]) == 0
    out = capsys.readouterr().out
    assert "0 errors, 0 warnings, 0 infos (1 suppressed)" in out and "ignored: rows stay below 50,000" in out
    assert check_main([f, "--format", "json"]) == 1
    d = json.loads(capsys.readouterr().out)
    (j,) = [x for x in d["findings"] if x["rule"] == "int32-offset"]
    assert j["suppressed"] is True and j["justification"] == "rows stay below 50,000"
    assert check_main([f, "--format", "sarif"]) == 1
    results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    (s,) = [r for r in results if r["ruleId"] == "int32-offset"]
    assert s["suppressions"] == [{"kind": "inSource", "justification": "rows stay below 50,000"}]


def test_a_baseline_accepts_todays_findings_wherever_their_lines_move(tmp_path, capsys):
    base = tmp_path / "baseline.json"
    f = _write(tmp_path / "kernels.py")
    assert check_main([f, "--write-baseline", str(base)]) == 0
    entries = json.loads(base.read_text())["findings"]
    assert {e["rule"] for e in entries} == {"int32-offset", "int-division-sign"}
    assert all("line" not in e for e in entries)
    # ten lines added above: the same findings, at other lines, are still the baseline's
    f = _write(tmp_path / "kernels_moved.py", pad=10)
    capsys.readouterr()
    assert check_main([f, "--baseline", str(base)]) == 0
    assert "(2 in the baseline)" in capsys.readouterr().out
    # a new bug fails the run, alone
    f = _write(tmp_path / "kernels_new.py", extra=NEW_BUG)
    assert check_main([f, "--baseline", str(base), "--format", "json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert [x["kernel"] for x in d["findings"] if not x["baseline"]] == ["_new_kernel"]
    assert check_main([f, "--baseline", str(base), "--format", "sarif"]) == 1
    states = {
        r["properties"]["kernel"]: r["baselineState"] for r in json.loads(capsys.readouterr().out)["runs"][0]["results"]
    }
    assert states == {"_new_kernel": "new", "_rows_kernel": "unchanged", "_ring_kernel": "unchanged"}
    # a fixed finding leaves a stale entry: noted, not fatal
    f = _write(tmp_path / "kernels_fixed.py", row_note="  # tritonkit: ignore[int32-offset] reviewed")
    rep = run_check([f], Options(disk_cache=False, baseline=str(base)))
    assert rep.exit_code() == 0
    # the stale entry is named: its rule, kernel and code
    assert any(
        p.kind == "baseline"
        and "1 entry matches no finding" in p.message
        and "int32-offset in _rows_kernel: `tl.store(x_ptr + row * stride" in p.message
        for p in rep.problems
    )
    # entries of a rule that did not run, or of a kernel not checked, are not stale
    f = _write(tmp_path / "kernels_again.py")
    rep = run_check([f], Options(disk_cache=False, baseline=str(base), rules=("int32-offset",)))
    assert rep.exit_code() == 0 and not [p for p in rep.problems if p.kind == "baseline"]
    other = tmp_path / "other.py"
    other.write_text(
        KERNELS.split("@tritonkit.case")[0].replace("{ROW_NOTE}", "").replace("{RING_NOTE}", "").replace("{EXTRA}", "")
        + NEW_BUG.replace("_new_kernel", "_other_kernel")
        + """
@tritonkit.case(n=[4])
def other(n):
    _other_kernel[(n,)](torch.empty(64, device="meta"), 16, BLOCK=16)
"""
    )
    rep = run_check([str(other)], Options(disk_cache=False, baseline=str(base)))
    assert not [p for p in rep.problems if p.kind == "baseline"]


def test_a_bad_baseline_fails_in_one_line_before_the_run(tmp_path, capsys):
    f = _write(tmp_path / "kernels.py")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path in (bad, tmp_path / "missing.json"):
        assert check_main([f, "--baseline", str(path)]) == 2
        err = capsys.readouterr().err
        assert len([ln for ln in err.splitlines() if "baseline" in ln]) == 1 and "Traceback" not in err


def test_a_suppression_naming_an_unknown_rule_is_a_problem(tmp_path):
    f = _write(tmp_path / "typo.py", row_note="  # tritonkit: ignore[int32-ofset] rows stay below 50,000")
    rep = run_check([f], Options(disk_cache=False))
    (p,) = [p for p in rep.problems if p.kind == "suppression"]
    assert p.fatal and rep.exit_code() == 2 and "'int32-ofset'" in p.message and "int32-offset" in p.message
    assert p.where.endswith("typo.py:11")


WIDE = """
import torch
import triton
import triton.language as tl
import tritonkit


@triton.jit
def _wide_kernel(x_ptr):
    tl.store(x_ptr + tl.program_id(1), 1.0)


def launch(x, heads):
    _wide_kernel[(1, heads)](x)


@tritonkit.case(heads=[70_000])
def first(heads):
    launch(torch.empty(8, device="meta"), heads)
"""

ANOTHER_LINE = """

@tritonkit.case(heads=[90_000])
def second(heads):
    _wide_kernel[(1, 2 * heads)](torch.empty(8, device="meta"))
"""

THE_SAME_LINE_ELSEWHERE = """

def launch_again(x, heads):
    _wide_kernel[(1, heads)](x)


@tritonkit.case(heads=[90_000])
def second(heads):
    launch_again(torch.empty(8, device="meta"), heads)
"""


def test_a_new_call_site_of_a_baselined_kernel_is_a_new_finding(tmp_path, capsys):
    base = tmp_path / "baseline.json"
    (tmp_path / "wide.py").write_text(WIDE)
    assert check_main([str(tmp_path / "wide.py"), "--write-baseline", str(base)]) == 0
    for name, extra in (("other_line.py", ANOTHER_LINE), ("same_line.py", THE_SAME_LINE_ELSEWHERE)):
        f = tmp_path / name
        f.write_text(WIDE + extra)
        rep = run_check([str(f)], Options(disk_cache=False, baseline=str(base), rules=("grid-limit",)))
        text = f.read_text().splitlines()
        sites = [i for i, ln in enumerate(text, 1) if ln.strip().startswith("_wide_kernel[")]
        # the baselined launch stays accepted; the new site (a larger grid) is a finding of its own, failing the run
        assert {x.line: x.baseline for x in rep.findings} == {sites[0]: True, sites[1]: False}, name
        assert rep.exit_code() == 1
    # an entry from a baseline written before entries named their function matches the code in any function
    d = json.loads(base.read_text())
    for e in d["findings"]:
        del e["scope"]
    base.write_text(json.dumps(d))
    rep = run_check([str(tmp_path / "same_line.py")], Options(disk_cache=False, baseline=str(base)))
    assert rep.exit_code() == 0 and all(x.baseline for x in rep.findings)


RAISES = """

@tritonkit.case(n=[1])
def broken(n):
    raise ValueError("this case cannot run")
"""


def test_a_run_that_did_not_check_everything_writes_no_baseline(tmp_path, capsys):
    # exit 2 (a case that raised): a baseline written then would accept findings of a run that missed code
    f = _write(tmp_path / "half.py", extra=RAISES)
    kept = tmp_path / "kept.json"
    kept.write_text("the accepted findings\n")
    assert check_main([f, "--write-baseline", str(kept), "--force"]) == 2
    err = capsys.readouterr().err
    assert f"the baseline {kept} was not written (left as it was)" in err and "this case cannot run" in err
    assert kept.read_text() == "the accepted findings\n"
    fresh = tmp_path / "fresh.json"
    assert check_main([f, "--write-baseline", str(fresh)]) == 2
    assert "was not written" in capsys.readouterr().err and not fresh.exists()
    # nothing checked at all (a file with no case): exit 2, no baseline either
    (tmp_path / "empty.py").write_text("x = 1\n")
    assert check_main([str(tmp_path / "empty.py"), "--write-baseline", str(fresh)]) == 2
    assert "nothing was checked" in capsys.readouterr().err and not fresh.exists()


def test_a_baseline_is_replaced_only_with_force_and_never_the_one_read(tmp_path, capsys):
    f = _write(tmp_path / "kernels.py")
    base = tmp_path / "baseline.json"
    assert check_main([f, "--write-baseline", str(base)]) == 0
    written = base.read_text()
    base.write_text(written.replace('"findings"', '"findings" ', 1))  # changed by hand since
    edited = base.read_text()
    assert check_main([f, "--write-baseline", str(base)]) == 2
    err = capsys.readouterr().err
    assert f"--write-baseline {base}: cannot write the baseline there" in err and "pass --force" in err
    assert base.read_text() == edited
    assert check_main([f, "--baseline", str(base), "--write-baseline", str(base), "--force"]) == 2
    assert "is the --baseline file this run reads" in capsys.readouterr().err and base.read_text() == edited
    assert check_main([f, "--write-baseline", str(base), "--force"]) == 0
    assert base.read_text() == written


def test_write_baseline_without_replace_leaves_a_file_that_appeared(tmp_path):
    # the CLI looks before the run and again before writing; write_baseline(replace=False) closes the gap between
    from tritonkit.check.adopt import write_baseline
    from tritonkit.check.capture.target import CheckError

    path = tmp_path / "b.json"
    assert write_baseline(str(path), [], replace=False) == 0
    first = path.read_text()
    path.write_text("mine\n")
    with pytest.raises(CheckError, match="cannot write the baseline"):
        write_baseline(str(path), [], replace=False)
    assert path.read_text() == "mine\n"
    write_baseline(str(path), [], replace=True)
    assert path.read_text() == first

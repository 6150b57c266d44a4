"""Failures are reported by name with their reason, and everything else is still checked."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tritonkit.check import Options, run_check
from tritonkit.check.cli import main as check_main

CORPUS = Path(__file__).parent / "corpus"
BROKEN = CORPUS / "broken"
KV_WRITE = Path(__file__).parent / "rules" / "int32_offset" / "kv_cache_write.py"
SRC = Path(__file__).parents[2] / "src"


@pytest.fixture(scope="module")
def report():
    return run_check([str(BROKEN)], Options(disk_cache=False))


def _problem(report, kind, text):
    return [p for p in report.problems if p.kind == kind and text in (p.where + " " + p.message)]


def test_import_failure_is_named_with_its_reason(report):
    (p,) = _problem(report, "import", "import_error.py")
    assert p.fatal and "ModuleNotFoundError" in p.message and "tritonkit_no_such_module" in p.message


def test_compile_failure_is_named_and_the_other_kernel_still_checked(report):
    (p,) = _problem(report, "compile", "_bad_arange_kernel")
    assert "power of 2" in p.message and "compile_error.py" in p.where
    (f,) = [f for f in report.findings if f.kernel == "_per_token_y_kernel"]
    assert f.rule == "grid-limit" and f.case == {"num_tokens": 100_000}


def test_raising_case_is_named_with_its_parameters_and_the_rest_runs(report):
    (p,) = _problem(report, "case", "ValueError")
    assert "{'n': -1}" in p.where and "n must be non-negative" in p.message and "case_error.py:19" in p.message
    assert any(k["kernel"] == "_scale_kernel" and k["launches"] == 1 for k in report.kernels)


def test_unknown_ir_constructs_are_notes_naming_the_construct(report):
    notes = [p for p in report.problems if p.kind == "ir"]
    assert all(not p.fatal for p in notes)
    text = " ".join(p.message for p in notes)
    assert "non-inlined call (tt.call" in text
    assert "scf.while" in text
    assert not [f for f in report.findings if f.kernel == "_noinline_offset_kernel"]


def test_a_kernel_that_did_not_compile_exits_2_even_beside_findings(report, capsys):
    # a CI job must not pass (or merely "fail on findings") while a kernel went unchecked: both are reported
    assert report.findings and report.exit_code() == 2
    assert check_main([str(BROKEN / "compile_error.py")]) == 2
    out = capsys.readouterr().out
    assert "[grid-limit]" in out and "could not check" in out and "_bad_arange_kernel" in out
    # and the summary that closes the report says so: its counts alone would read as a clean run
    summary = " ".join(out.rstrip().split("\n\n")[-1].split())
    (n,) = re.findall(r"could not check \((\d+)\):", out)
    assert summary.startswith("tritonkit check: ") and summary.endswith(
        f"; incomplete: {n} could not be checked (listed above)"
    ), summary


def test_unwritable_output_is_one_line_before_the_run(tmp_path, capsys):
    for target in (tmp_path / "no" / "such" / "dir" / "r.json", tmp_path):
        assert check_main([str(KV_WRITE), "-o", str(target)]) == 2
        err = capsys.readouterr().err
        assert len([ln for ln in err.splitlines() if "cannot write the report" in ln]) == 1
        assert "Traceback" not in err


def test_case_files_import_from_the_working_directory_and_their_folder(tmp_path, monkeypatch):
    # `from mypkg.kv import ...` from a checkout's root, as pytest allows, with no PYTHONPATH
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "kv.py").write_text(
        textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def _cwd_kernel(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
    """)
    )
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "helpers_here.py").write_text("N = 64\n")
    (tmp_path / "checks" / "cwd_cases.py").write_text(
        textwrap.dedent("""
        import torch
        import tritonkit
        from helpers_here import N
        from mypkg.kv import _cwd_kernel

        @tritonkit.case(n=[1])
        def cwd_case(n):
            _cwd_kernel[(n,)](torch.empty(N, device="meta"), BLOCK=N)
    """)
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    rep = run_check(["checks/cwd_cases.py"], Options(disk_cache=False))
    assert not [p for p in rep.problems if p.fatal], rep.problems
    assert [k["kernel"] for k in rep.kernels] == ["_cwd_kernel"]


def test_only_unimportable_file_exits_2(capsys):
    assert check_main([str(BROKEN / "import_error.py")]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert "could not check" in out.out and "import_error.py" in out.out


def test_missing_file_and_bad_options_exit_2(capsys):
    assert check_main(["/nonexistent/cases.py"]) == 2
    assert check_main([str(KV_WRITE), "--rule", "no-such-rule"]) == 2
    assert "unknown rule" in capsys.readouterr().err
    assert check_main([str(KV_WRITE), "--arch", "sm_61"]) == 2


def test_cli_under_triton_interpret_still_compiles():
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "TRITONKIT_CACHE_DIR": ""}
    r = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", str(KV_WRITE), "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 1, r.stderr
    assert "ignoring TRITON_INTERPRET=1" in r.stderr
    d = json.loads(r.stdout)
    assert [f["kernel"] for f in d["findings"]] == ["_kv_write_i32_kernel"]


def test_kernels_defined_while_interpreting_are_compiled(tmp_path):
    # a kernel module imported with the interpreter on (what the kernel tests of this suite do), then checked in
    # the same process; a fresh process so that no earlier test has run the interpreter already
    (tmp_path / "interp_kernels.py").write_text(
        textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def _helper(x, s):
            return x * s

        @triton.jit
        def _interp_kernel(x_ptr, slot_ptr, stride, BLOCK: tl.constexpr):
            slot = tl.load(slot_ptr + tl.program_id(0))
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + _helper(slot, stride) + offs, tl.sum(tl.load(x_ptr + offs), axis=0) + offs)
    """)
    )
    (tmp_path / "interp_cases.py").write_text(
        textwrap.dedent("""
        import torch
        import tritonkit
        from interp_kernels import _interp_kernel

        @tritonkit.case(n=[4])
        def interp(n):
            x = torch.empty(2**32, device="meta", dtype=torch.float32)
            slot = torch.empty(n, device="meta", dtype=torch.int32)
            _interp_kernel[(n,)](x, slot, 1024, BLOCK=64)
    """)
    )
    (tmp_path / "driver.py").write_text(
        textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import interp_kernels
        assert type(interp_kernels._interp_kernel).__name__ == "InterpretedFunction"
        from tritonkit.check import Options, run_check
        rep = run_check([{str(tmp_path / "interp_cases.py")!r}], Options(disk_cache=False))
        print(json.dumps({{"findings": [(f.rule, f.kernel) for f in rep.findings],
                          "problems": [(p.fatal, p.message) for p in rep.problems],
                          "restored": type(interp_kernels._helper).__name__}}))
    """)
    )
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "TRITONKIT_CACHE_DIR": ""}
    r = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py")], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["findings"] == [["int32-offset", "_interp_kernel"]]
    assert not [m for fatal, m in d["problems"] if fatal]
    assert any("TRITON_INTERPRET=1" in m for _, m in d["problems"])
    # restored afterwards: the module still holds its interpreted functions
    assert d["restored"] == "InterpretedFunction"


def test_after_the_interpreter_ran_the_check_runs_in_a_fresh_process(tmp_path):
    # Triton's interpreter leaves triton.language patched once an interpreted kernel has called a jit helper
    (tmp_path / "driver.py").write_text(
        textwrap.dedent(f"""
        import json
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def _sum_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(y_ptr, tl.sum(tl.load(x_ptr + offs), axis=0))

        y = torch.empty(1)
        _sum_kernel[(1,)](torch.ones(16), y, BLOCK=16)
        assert y.item() == 16.0
        from tritonkit.check import Options, run_check
        from tritonkit.check.runner import interpreter_leaked
        assert interpreter_leaked()
        rep = run_check([{str(KV_WRITE)!r}], Options(disk_cache=False))
        print(json.dumps({{"findings": [(f.rule, f.kernel, f.line) for f in rep.findings],
                          "problems": [(p.fatal, p.message) for p in rep.problems]}}))
    """)
    )
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "TRITONKIT_CACHE_DIR": ""}
    r = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py")], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["findings"] == [["int32-offset", "_kv_write_i32_kernel", 28]]
    assert [m for fatal, m in d["problems"] if not fatal and "fresh process" in m]
    assert not [m for fatal, m in d["problems"] if fatal]


def test_one_operand_integer_op_in_an_offset_does_not_fail_the_rule(tmp_path):
    # math.absi (tl.abs of an int) has a single integer operand: the range analysis must give up on that value,
    # not raise and take every int32-offset finding of the run with it
    (tmp_path / "abs_cases.py").write_text(
        textwrap.dedent("""
        import torch
        import triton
        import triton.language as tl
        import tritonkit

        @triton.jit
        def _abs_offset_kernel(x_ptr, i_ptr, stride, BLOCK: tl.constexpr):
            i = tl.load(i_ptr + tl.program_id(0))
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + tl.abs(i) * stride + offs, tl.zeros([BLOCK], dtype=tl.float32))

        @tritonkit.case(n=[4])
        def abs_offset(n):
            x = torch.empty(4096, device="meta", dtype=torch.float32)
            i = torch.empty(n, device="meta", dtype=torch.int32)
            _abs_offset_kernel[(n,)](x, i, 1024, BLOCK=64)
    """)
    )
    rep = run_check([str(tmp_path / "abs_cases.py")], Options(disk_cache=False))
    assert not [p for p in rep.problems if p.kind == "rule"], [p.message for p in rep.problems]
    assert any(k["kernel"] == "_abs_offset_kernel" and k["launches"] == 1 for k in rep.kernels)


def test_a_loaded_bounds_key_naming_no_pointer_parameter_refuses_the_case(tmp_path, capsys):
    (tmp_path / "typo_cases.py").write_text(
        textwrap.dedent("""
        import torch
        import triton
        import triton.language as tl
        import tritonkit

        @triton.jit
        def _typo_kernel(cache_ptr, slot_mapping_ptr, stride, BLOCK: tl.constexpr):
            slot = tl.load(slot_mapping_ptr + tl.program_id(0))
            offs = tl.arange(0, BLOCK)
            tl.store(cache_ptr + slot * stride + offs, tl.zeros([BLOCK], tl.float32))

        def _args(n):
            return (torch.empty(4096 * 512, device="meta"), torch.empty(n, dtype=torch.int32, device="meta"), 512)

        @tritonkit.case(n=[4, 8], loaded_bounds={"slot_maping_ptr": (0, 4095)})
        def typo(n):
            _typo_kernel[(n,)](*_args(n), BLOCK=16)

        @tritonkit.case(n=[4], loaded_bounds={"_other_kernel.slot_mapping_ptr": (0, 4095)})
        def other_kernel(n):
            _typo_kernel[(n,)](*_args(n), BLOCK=16)

        @tritonkit.case(n=[4], loaded_bounds={"_typo_kernel.slot_mapping_ptr": (0, 4095)})
        def right(n):
            _typo_kernel[(n,)](*_args(n), BLOCK=16)

        @triton.jit
        def _optional_kernel(x_ptr, idx_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            if idx_ptr is not None:
                offs += tl.load(idx_ptr)
            tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32))

        # an optional pointer that is None in this launch is still a parameter the bound may name
        @tritonkit.case(n=[4], loaded_bounds={"idx_ptr": (0, 64)})
        def optional_none(n):
            _optional_kernel[(n,)](torch.empty(128, device="meta"), None, BLOCK=16)
    """)
    )
    rep = run_check([str(tmp_path / "typo_cases.py")], Options(disk_cache=False))
    refused = [p for p in rep.problems if "refused" in p.message]
    assert len(refused) == 2 and all(p.fatal for p in refused)
    assert "'slot_maping_ptr'" in refused[0].message and "typo" in refused[0].where
    assert "_typo_kernel: cache_ptr, slot_mapping_ptr" in refused[0].message
    assert "'_other_kernel.slot_mapping_ptr'" in refused[1].message
    # the refused cases' launches are not checked; the well-formed one is, and is clean
    assert [(k["kernel"], k["launches"]) for k in rep.kernels] == [("_typo_kernel", 1), ("_optional_kernel", 1)]
    assert rep.findings == [] and rep.exit_code() == 2


MANY_LAUNCHES = """
import torch, triton, triton.language as tl, tritonkit

@triton.jit(do_not_specialize=["stride", "tag"])
def _rows_kernel(x_ptr, stride, tag, D: tl.constexpr):
    tl.store(x_ptr + tl.program_id(0) * stride + tl.arange(0, D), tl.zeros([D], tl.float32))

@tritonkit.case(i=list(range({N})))
def many(i):
    # every launch binds other values; only launch {BAD} multiplies past 2^31 ({BAD_STRIDE} * 999)
    stride, tag = ({BAD_STRIDE}, 0) if i == {BAD} else (1000, {TAG} + i)
    _rows_kernel[(1000,)](torch.empty(64, device="meta"), stride, tag, D=16)
"""


@pytest.mark.parametrize(
    "bad, tag, expect",
    [
        (650, 10**9, "unchecked"),  # past the first 512, and not among the largest of the rest: the run says so
        (650, 0, "found"),  # the largest of the rest is analysed too: the last case of a sweep is often it
        (3, 10**9, "found"),
    ],
)
def test_a_rule_that_gives_up_before_deciding_makes_the_run_exit_2(tmp_path, capsys, bad, tag, expect):
    f = tmp_path / "many.py"
    f.write_text(
        MANY_LAUNCHES.replace("{N}", "700")
        .replace("{BAD}", str(bad))
        .replace("{TAG}", str(tag))
        .replace("{BAD_STRIDE}", str(2**22))
    )
    rep = run_check([str(f)], Options(disk_cache=False, rules=("int32-offset",)))
    if expect == "found":
        (fi,) = rep.findings
        assert fi.case == {"i": bad} and not [p for p in rep.problems if p.fatal]
        return
    assert rep.findings == []
    (p,) = [p for p in rep.problems if p.fatal]
    assert p.kind == "rule" and "_rows_kernel" in p.where
    assert p.message.startswith("int32-offset could not decide: an int32 overflow of this offset is possible")
    assert "the first 512 of 700 distinct ones in case order" in p.message and "124 were not analysed" in p.message
    assert check_main([str(f), "--rule", "int32-offset"]) == 2


MANY_SHIFTS = """
import torch, triton, triton.language as tl, tritonkit

@triton.jit(do_not_specialize=["shift"])
def _shifted_reload_kernel(x_ptr, shift, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32))
    tl.store(x_ptr + offs + 2 * BLOCK, tl.load(x_ptr + shift + offs))

@tritonkit.case(i=list(range(300)))
def shifts(i):
    # only launch 295 reads back what it stored (shift 5 < BLOCK); all reach as far (their allocation)
    _shifted_reload_kernel[(1,)](torch.empty(2**21, device="meta"), 5 if i == 295 else 10**6 + i, BLOCK=32)
"""


def test_a_memory_rule_that_gives_up_before_deciding_makes_the_run_exit_2(tmp_path):
    f = tmp_path / "shifts.py"
    f.write_text(MANY_SHIFTS)
    rep = run_check([str(f)], Options(disk_cache=False, rules=("store-then-load",)))
    assert rep.findings == []
    (p,) = [p for p in rep.problems if p.fatal]
    assert p.message.startswith("store-then-load could not decide: this load meeting the store at line 7 is possible")
    assert "the first 256 of 300 distinct ones" in p.message and rep.exit_code() == 2


def test_a_builtin_op_name_as_a_path_points_at_op(capsys):
    # `tritonkit check fused_moe` reads fused_moe as a module to import; the failure names the option meant
    assert check_main(["fused_moe"]) == 2
    out = capsys.readouterr().out
    assert "No module named 'fused_moe'" in out and "`tritonkit check --op fused_moe`" in out
    # a module that is no op gets no such hint
    assert check_main(["tritonkit_no_such_module"]) == 2
    assert "--op" not in capsys.readouterr().out


_CASES_HEADER = """
import torch
import triton
import triton.language as tl
import tritonkit

@triton.jit
def _skip_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
"""


def _check_cases(tmp_path, cases: str):
    """The report of a file of ``cases`` that launch ``_skip_kernel`` (a 64-element load and store)."""
    (tmp_path / "cases.py").write_text(_CASES_HEADER + textwrap.dedent(cases))
    return run_check([str(tmp_path / "cases.py")], Options(disk_cache=False))


def test_runs_that_launch_nothing_are_counted_in_a_note(tmp_path):
    # a case that skips some of its parameter values: those runs checked nothing, which the report says (not fatal:
    # the other runs were checked), naming the first such run and both ways it comes about
    rep = _check_cases(
        tmp_path,
        """
        @tritonkit.case(n=[1, 2, 3])
        def skip_case(n):
            if n == 2:
                return
            _skip_kernel[(n,)](torch.empty(64, device="meta"), BLOCK=64)
        """,
    )
    (note,) = [p for p in rep.problems if "launched no Triton kernel" in p.message]
    assert not note.fatal and note.message.startswith("1 of 3 runs launched no Triton kernel (first: {'n': 2})")
    assert "meta implementation" in note.message and "returned before launching" in note.message
    assert [k["kernel"] for k in rep.kernels] == ["_skip_kernel"]


def test_runs_whose_launches_triton_refused_are_named_without_the_meta_hint(tmp_path):
    # a run whose launch Triton rejects (3 warps) is a fatal capture problem; the case note names its values and
    # sends the reader there, not to the meta-dispatch advice that fits runs that really launched nothing
    rep = _check_cases(
        tmp_path,
        """
        @tritonkit.case(w=[2, 3, 4])
        def warps_case(w):
            _skip_kernel[(1,)](torch.empty(64, device="meta"), BLOCK=64, num_warps=w)
        """,
    )
    assert [p.kind for p in rep.problems if p.fatal] == ["capture"] and rep.exit_code() == 2
    (note,) = [p for p in rep.problems if p.kind == "case"]
    assert not note.fatal and note.message.startswith("1 of 3 runs launched nothing that could be checked (first: ")
    assert "{'w': 3}" in note.message and "meta implementation" not in note.message

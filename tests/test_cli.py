import json
import os
import subprocess
import sys

import pytest

import tritonkit
from tritonkit.cli import main


def test_version_prints_the_package_version_and_exits_0():
    p = subprocess.run([sys.executable, "-m", "tritonkit", "--version"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"tritonkit {tritonkit.__version__}\n" and p.stderr == ""


def test_version_is_listed_in_the_usage(capsys):
    assert main(["--help"]) == 0
    assert "tritonkit --version" in capsys.readouterr().out


def test_unknown_command_names_it(capsys):
    assert main(["--versoin"]) == 2
    assert "unknown command '--versoin'" in capsys.readouterr().err


def test_output_cut_short_by_the_reader_is_not_a_traceback():
    import subprocess
    import sys

    # `true` exits without reading: the page is written to a pipe nobody reads (`| head -1` on a long page)
    proc = subprocess.run(
        f"{sys.executable} -m tritonkit check --explain int32-offset | true",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


_TOO_WIDE = """
import torch, triton, triton.language as tl, tritonkit
@triton.jit
def _one_kernel(x_ptr):
    tl.store(x_ptr + tl.program_id(0), 1.0)
@tritonkit.case(n=[1])
def too_wide(n):
    _one_kernel[(1, 70_000)](torch.empty(8, device="meta"))
"""

_FAILS = """
import torch
from tritonkit import OpSpec
S = OpSpec("wrong", lambda x: x * 2, lambda shape, dtype, fill: {"x": fill((shape["n"],), dtype)},
           reference=lambda inputs, dtype: {"out": inputs["x"] * 3}, boundary=[{"n": 4}],
           dtypes=(torch.float32,), families=("randn",))
"""


@pytest.mark.parametrize("verb, body", [("check", _TOO_WIDE), ("validate", _FAILS)])
def test_a_failing_run_still_fails_when_the_reader_has_gone(verb, body, tmp_path):
    # `tritonkit check k.py | true`: the pipe's reader is gone before the report is written
    (tmp_path / "k.py").write_text(body)
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(
            [sys.executable, "-m", "tritonkit", verb, "k.py"],
            cwd=tmp_path,
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            env={**os.environ, "TRITON_INTERPRET": "0"},
        )
    finally:
        os.close(w)
    assert p.returncode == 1 and "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


@pytest.mark.parametrize("verb", ["", "check", "validate", "bench", "inductor", "tune"])
def test_help_imports_neither_torch_nor_triton(verb):
    # `tritonkit [VERB] --help` answers in a fraction of a second: torch's import alone takes seconds on a CPU
    code = (
        "import sys, runpy; sys.argv = ['tritonkit'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('tritonkit', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    args = [verb, "--help"] if verb else ["--help"]
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout[-500:] + r.stderr[-500:]


# the house rules on output files: an existing file is replaced only with --force, never one the run reads, a link
# only when it leads to a stream; conflicting outputs and options that do not apply are refused before the run

_OK_CASE = """
import torch, triton, triton.language as tl, tritonkit
@triton.jit
def _ok_kernel(x_ptr):
    tl.store(x_ptr + tl.program_id(0), 1.0)
@tritonkit.case(n=[1, 2])
def fine(n):
    _ok_kernel[(n,)](torch.empty(8, device="meta"))
"""


def _case_file(tmp_path, name="k.py", body=_OK_CASE):
    f = tmp_path / name
    f.write_text(body)
    return f


def test_check_replaces_an_existing_report_only_with_force(tmp_path, capsys):
    from tritonkit.check.cli import main as check_main

    k, out = _case_file(tmp_path), tmp_path / "r.json"
    out.write_text("keep")
    assert check_main([str(k), "-o", str(out), "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert f"-o {out}: cannot write the report there" in err and "pass --force to replace it" in err
    assert out.read_text() == "keep"
    assert check_main([str(k), "-o", str(out), "--format", "json", "--force"]) == 0
    assert json.loads(out.read_text())["stats"]["cases"] == 2


def test_check_never_writes_over_a_file_it_reads_even_with_force(tmp_path, capsys):
    from tritonkit.check.cli import main as check_main

    k = _case_file(tmp_path)
    kernels = _case_file(tmp_path, "reads_kernels.py", _OK_CASE.split("@tritonkit.case")[0])
    uses = _case_file(
        tmp_path,
        "uses.py",
        f"import torch, tritonkit\nfrom {kernels.stem} import _ok_kernel\n"
        '@tritonkit.case(n=[1])\ndef fine(n):\n    _ok_kernel[(n,)](torch.empty(8, device="meta"))\n',
    )
    sources = {p: p.read_text() for p in (k, kernels, uses)}
    for argv in (
        [str(k), "-o", str(k)],  # the checked file itself
        [str(tmp_path), "-o", str(k)],  # a file under the directory checked
        [str(k), "--write-baseline", str(k)],
        [str(uses), "-o", str(kernels)],  # the source of a kernel the run checked, known after the run
    ):
        assert check_main([*argv, "--force"]) == 2, argv
        err = capsys.readouterr().err
        assert "which this run reads; it is not written over, even with --force" in err, argv
    assert {p: p.read_text() for p in sources} == sources


def test_check_refuses_a_link_to_a_file_elsewhere_saying_where_it_points(tmp_path, capsys):
    from tritonkit.check.cli import main as check_main

    k, target = _case_file(tmp_path), tmp_path / "elsewhere.json"
    target.write_text("keep")
    (tmp_path / "out").symlink_to(target)
    assert check_main([str(k), "-o", str(tmp_path / "out"), "--force"]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and str(target) in err and target.read_text() == "keep"


def test_check_writes_dev_stdout_into_the_file_the_shell_opened(tmp_path):
    # `tritonkit check k.py -o /dev/stdout >> log`: the report goes after what the log held, into the same file
    k, log = _case_file(tmp_path), tmp_path / "log"
    log.write_text("earlier\n")
    with open(log, "a") as fh:
        p = subprocess.run(
            [sys.executable, "-m", "tritonkit", "check", str(k), "-o", "/dev/stdout", "--format", "json"],
            stdout=fh,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            env={**os.environ, "TRITON_INTERPRET": "0"},
        )
    assert p.returncode == 0, p.stderr
    text = log.read_text()
    assert text.startswith("earlier\n") and json.loads(text[len("earlier\n") :])["stats"]["cases"] == 2


def test_check_refuses_conflicting_outputs_before_the_run(tmp_path, capsys):
    from tritonkit.check.cli import main as check_main

    marker = tmp_path / "imported"
    k = _case_file(tmp_path, body=f"open({str(marker)!r}, 'w').close()\n" + _OK_CASE)
    base = tmp_path / "base.json"
    base.write_text('{"tritonkit_baseline": 1, "findings": []}\n')
    before = base.read_text()
    assert check_main([str(k), "--baseline", str(base), "-o", str(base), "--force"]) == 2
    assert f"-o {base} is the --baseline file this run reads" in capsys.readouterr().err
    same = tmp_path / "x.json"
    assert check_main([str(k), "-o", str(same), "--write-baseline", str(tmp_path / "." / "x.json")]) == 2
    assert "name one file" in capsys.readouterr().err
    assert check_main([str(k), "--baseline", str(base), "--write-baseline", str(base), "--force"]) == 2
    assert "without --baseline, rewrites it" in capsys.readouterr().err
    assert not marker.exists() and not same.exists() and base.read_text() == before


def test_check_explain_refuses_what_does_not_apply_beside_it(tmp_path, capsys):
    from tritonkit.check.cli import main as check_main

    out = tmp_path / "page.txt"
    assert check_main(["--explain", "int32-offset", str(tmp_path)]) == 2
    assert "PATH_OR_MODULE does not apply beside it" in capsys.readouterr().err
    assert check_main(["--explain", "int32-offset", "--arch", "sm_80", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--arch, -o do not apply" in err and not out.exists()
    assert check_main(["--explain", "int32-offset"]) == 0 and "int32" in capsys.readouterr().out


def test_check_runs_a_target_named_twice_once(tmp_path, monkeypatch):
    from tritonkit.check import Options, run_check

    k = _case_file(tmp_path, "dup_cases_once.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        once = run_check([str(k)], Options(disk_cache=False)).stats
        for targets in ([str(k), str(k)], [str(tmp_path), str(k)], ["dup_cases_once.py", "dup_cases_once"]):
            stats = run_check(targets, Options(disk_cache=False)).stats
            assert (stats["cases"], stats["launches"]) == (once["cases"], once["launches"]) == (2, 2), targets
    finally:
        sys.modules.pop("dup_cases_once", None)


_SPEC = """
import torch
from tritonkit import OpSpec
from {helpers} import twice
S = OpSpec("twice", twice, lambda shape, dtype, fill: {{"x": fill((shape["n"],), dtype)}},
           reference=lambda inputs, dtype: {{"out": inputs["x"] * 2}}, boundary=[{{"n": 4}}],
           dtypes=(torch.float32,), families=("randn",))
"""


def test_validate_replaces_an_existing_json_only_with_force_and_never_a_source(tmp_path, monkeypatch, capsys):
    from tritonkit.testing.cli import main as validate_main

    helpers = tmp_path / "twice_helpers.py"
    helpers.write_text("def twice(x):\n    return x * 2\n")
    (tmp_path / "twice_specs.py").write_text(_SPEC.format(helpers=helpers.stem))
    out = tmp_path / "v.json"
    out.write_text("keep")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert validate_main(["twice_specs.py", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--json {str(out)!r}: cannot write the results there" in err and "--force" in err
    assert out.read_text() == "keep"
    for source in ("twice_specs.py", str(helpers)):  # the spec file named; the module of its op (once loaded)
        before = (tmp_path / source).read_text()
        assert validate_main(["twice_specs.py", "--json", source, "--force"]) == 2
        assert "which this run reads" in capsys.readouterr().err and (tmp_path / source).read_text() == before
    assert validate_main(["twice_specs.py", "--json", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["meta"]["complete"] is True

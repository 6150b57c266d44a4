"""`tritonkit check` never reports a clean run that checked nothing, whatever the case files do."""

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tritonkit.check import Options, run_check
from tritonkit.check.cli import main as check_main

SRC = Path(__file__).parents[2] / "src"

KERNEL = """
import os
import time

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _ok_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@tritonkit.case(n=[1024])
def ok(n):
    x = torch.empty(n, device="meta", dtype=torch.float32)
    _ok_kernel[(triton.cdiv(n, 256),)](x, n, BLOCK=256)
"""


def _file(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(textwrap.dedent(KERNEL) + textwrap.dedent(body))
    return str(p)


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITONKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("where", ["import", "case"])
def test_os_exit_in_a_case_file_is_exit_2_with_the_reason(where, tmp_path, capsys):
    body = "os._exit(0)\n" if where == "import" else ("@tritonkit.case(n=[3])\ndef leaves(n):\n    os._exit(0)\n")
    f = _file(tmp_path, f"exit_{where}.py", body)
    assert check_main([f]) == 2
    out = " ".join(capsys.readouterr().out.split())  # the report wraps at 120 columns
    assert "called os._exit(0), which would end the check with no report" in out and f"exit_{where}.py" in out


def test_a_directory_that_cannot_be_read_is_a_problem_naming_it(tmp_path, monkeypatch):
    from tritonkit.check.runner import expand_paths

    _file(tmp_path, "fine.py", "")
    (tmp_path / "locked").mkdir()
    _file(tmp_path / "locked", "hidden_cases.py", "")
    real = os.scandir

    def scandir(path="."):
        if Path(path).name == "locked":  # what a directory without read permission does (root reads them all)
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    problems = []
    assert expand_paths([str(tmp_path)], problems) == [str(tmp_path / "fine.py")]
    (p,) = problems
    # a fatal problem: the run exits 2 (Report.exit_code), whatever else it checked
    assert p.fatal and p.where == str(tmp_path / "locked")
    assert p.message == "cannot read the directory: Permission denied"


@pytest.mark.parametrize("where", ["import", "case"])
def test_a_hanging_case_ends_as_a_problem_naming_it(where, tmp_path, capsys):
    body = (
        "while True:\n    pass\n"
        if where == "import"
        else ("@tritonkit.case(n=[5])\ndef spins(n):\n    while True:\n        time.sleep(0.01)\n")
    )
    f = _file(tmp_path, f"hang_{where}.py", body)
    t0 = time.monotonic()
    assert check_main([f, "--case-timeout", "1"]) == 2
    assert time.monotonic() - t0 < 60
    out = " ".join(capsys.readouterr().out.split())  # the report wraps at 120 columns
    assert "CaseTimeout: ran past the 1 s limit (--case-timeout) and was stopped" in out
    assert ("spins" in out and "{'n': 5}" in out) if where == "case" else f"hang_{where}.py" in out


@pytest.mark.parametrize("bad", ["-1", "soon", "inf", "nan"])
def test_case_timeout_takes_seconds(bad, capsys):
    with pytest.raises(SystemExit):
        check_main(["x.py", "--case-timeout", bad])
    assert "--case-timeout: expected a number of seconds" in capsys.readouterr().err


def test_prints_in_a_case_stay_off_the_json_report(tmp_path):
    f = _file(
        tmp_path,
        "chatty.py",
        """
    print("imported")

    @tritonkit.case(n=[7])
    def chatty(n):
        print("running", n)
        os.write(1, b"raw fd 1\\n")
        ok(n)
    """,
    )
    r = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", f, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(SRC), "TRITON_INTERPRET": "0"},
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stats"]["cases"] == 2
    assert "imported" in r.stderr and "running 7" in r.stderr and "raw fd 1" in r.stderr


@pytest.mark.parametrize(
    "grid, dim, what",
    [("(-1,)", 0, "a negative dimension"), ("(4, 0)", 1, "no program runs"), ("(4, 2, -3)", 2, "a negative dimension")],
)
def test_a_grid_below_one_is_a_grid_limit_finding(grid, dim, what, tmp_path):
    f = _file(
        tmp_path,
        "grids.py",
        f"""
    @tritonkit.case(n=[64])
    def bad_grid(n):
        x = torch.empty(n, device="meta", dtype=torch.float32)
        _ok_kernel[{grid}](x, n, BLOCK=64)
    """,
    )
    rep = run_check([f], Options(rules=("grid-limit",)))
    (g,) = [x for x in rep.findings if x.kernel == "_ok_kernel"]
    assert g.rule == "grid-limit" and g.tag == f"grid[{dim}]<1" and what in g.message
    assert rep.exit_code() == 1


def test_an_empty_batch_grid_is_no_finding(tmp_path):
    f = _file(
        tmp_path,
        "empty.py",
        """
    @tritonkit.case(n=[0])
    def empty(n):
        x = torch.empty(n, device="meta", dtype=torch.float32)
        _ok_kernel[(triton.cdiv(n, 64), 3)](x, n, BLOCK=64)
    """,
    )
    assert run_check([f], Options(rules=("grid-limit",))).findings == []


@pytest.mark.parametrize(
    "entry",
    ["[1, 2]", '{"ttir": 5}', '"text"', "{}", "not json", '{"ttir": "garbage"}', '{"ttir": "module {", "error": null}'],
)
def test_a_cache_entry_that_is_no_record_is_a_miss_rewritten_and_said_once(entry, tmp_path, capsys):
    f = _file(tmp_path, "cached.py", "")
    run_check([f], Options())
    entries = list((tmp_path / "cache").glob("*.json"))
    assert entries
    for e in entries:
        e.write_text(entry)
    capsys.readouterr()
    rep = run_check([f], Options())
    assert rep.exit_code() == 0 and rep.stats["compiled_now"] == len(entries)
    err = capsys.readouterr().err
    assert err.count("ignoring a corrupt IR cache entry") == 1 and str(tmp_path / "cache") in err
    assert all(json.loads(e.read_text())["ttir"] for e in entries)
    assert run_check([f], Options()).stats["compiled_now"] == 0 and "corrupt" not in capsys.readouterr().err


def test_ctrl_c_prints_one_line(tmp_path):
    started = tmp_path / "started"
    f = _file(
        tmp_path,
        "slow.py",
        f"@tritonkit.case(n=[1])\ndef slow(n):\n    open({str(started)!r}, 'w').close()\n    time.sleep(60)\n",
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "check", f, "-o", str(tmp_path / "r.txt")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Triton 3.9 warns on stderr that TRITON_DEFAULT_FP_FUSION is unset (its default flips in 3.10); 1 is the
        # default of every release here, and keeps stderr to what the checker says
        env={**os.environ, "PYTHONPATH": str(SRC), "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"},
        # pytest may run with SIGINT ignored (a shell starts a script's background jobs so), and a child inherits that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130
    assert err.strip().splitlines() == ["tritonkit check: interrupted"] and out == ""
    assert not (tmp_path / "r.txt").exists()


def test_a_report_write_that_fails_leaves_the_old_file_whole(tmp_path, monkeypatch, capsys):
    from tritonkit import _fileio as fileio

    out = tmp_path / "report.json"
    out.write_text("the previous report\n")
    f = _file(tmp_path, "ok.py", "")

    class Full:
        def __init__(self, path, mode):
            self.fh = open(path, mode)

        def write(self, text):
            self.fh.write(text[:10])
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(fileio, "open", Full, raising=False)
    assert check_main([f, "-o", str(out), "--format", "json", "--force"]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert out.read_text() == "the previous report\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "cache",
        "ok.py",
        "report.json",
    ]


def test_a_missing_path_is_no_such_file_not_a_module(capsys):
    assert check_main(["no/such/dir"]) == 2
    out = capsys.readouterr().out
    assert "no/such/dir" in out and "no such file or directory" in out and "No module named" not in out


def test_a_device_is_named_not_imported(capsys):
    # /dev/null used to fail inside importlib with an AttributeError, and a tty would wait for input
    assert check_main(["/dev/null"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "/dev/null: not a python file: a character device, not read" in out and "AttributeError" not in out


def test_a_pipe_is_read_like_a_file(tmp_path, capsys):
    # `tritonkit check <(generate)` names a pipe: its text is the module
    fifo = tmp_path / "generated.py"
    os.mkfifo(fifo)
    writer = subprocess.Popen(
        [sys.executable, "-c", f"open({str(fifo)!r}, 'w').write('X = 1\\n')"], stdout=subprocess.DEVNULL
    )
    assert check_main([str(fifo)]) == 2  # imported, and it defines nothing to check
    writer.wait(timeout=60)
    out = " ".join(capsys.readouterr().out.split())
    assert "defines no @tritonkit.case" in out and "not a python file" not in out


def test_a_symlink_loop_says_so(tmp_path, capsys):
    loop = tmp_path / "loop.py"
    loop.symlink_to(tmp_path / "loop.py")
    assert check_main([str(loop)]) == 2
    assert "cannot follow the symlink: Too many levels of symbolic links" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("opt", [["--op", "rms_norm"], ["--space", "boundary"]])
def test_op_and_space_beside_a_path_are_refused(opt, tmp_path, capsys):
    assert check_main([_file(tmp_path, "a.py", ""), *opt]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"tritonkit check: {opt[0]} select built-in ops, and apply only with no PATH")


def test_a_deeply_nested_baseline_is_malformed_exit_2(tmp_path, capsys):
    b = tmp_path / "base.json"
    b.write_text("[" * 100_000 + "]" * 100_000)
    assert check_main([_file(tmp_path, "a.py", ""), "--baseline", str(b)]) == 2
    err = capsys.readouterr().err
    assert f"the baseline {b} is malformed" in err and "Traceback" not in err


SPEC_ONLY = """
import torch
import triton
import triton.language as tl
from tritonkit import OpSpec


@triton.jit
def _twice_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def twice(x):
    y = torch.empty_like(x)
    _twice_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
    return y


TWICE = OpSpec("twice", twice, lambda s, d, fill: {"x": fill((s["n"],), d)},
               reference=lambda i, d: {"out": 2 * i["x"]}, boundary=[{"n": 1}, {"n": 65}], dtypes=(torch.float32,))
"""


def test_specs_without_a_sweep_say_only_boundary_shapes_are_checked(tmp_path, capsys):
    (tmp_path / "twice_specs.py").write_text(SPEC_ONLY)
    assert check_main([str(tmp_path / "twice_specs.py")]) == 0
    out = capsys.readouterr().out
    assert (
        "op twice: declares no sweep_shape and no large shapes: only its 2 boundary shapes are checked"
        in out.replace("\n  ", " ")
    )


def test_a_case_file_that_never_finishes_reading_is_stopped(tmp_path, capsys):
    fifo = tmp_path / "pipe_cases.py"
    os.mkfifo(fifo)  # nobody ever writes: opening it for reading blocks forever
    t0 = time.monotonic()
    assert check_main([str(fifo), "--case-timeout", "1"]) == 2
    assert time.monotonic() - t0 < 60
    out = " ".join(capsys.readouterr().out.split())  # the report wraps at 120 columns
    assert "pipe_cases.py" in out and "CaseTimeout: ran past the 1 s limit" in out


def test_a_case_that_changes_directory_moves_no_file_the_run_writes(tmp_path, monkeypatch):
    away = tmp_path / "away"
    away.mkdir()
    body = f"os.chdir({str(away)!r})\n\n@tritonkit.case(n=[2])\ndef moves(n):\n    os.chdir({str(away)!r})\n    ok(n)\n"
    _file(tmp_path, "a_moves.py", body)
    _file(tmp_path, "b_stays.py", "")  # named by a relative path, imported after a_moves.py moved the process
    (tmp_path / "accepted.json").write_text('{"tritonkit_baseline": 1, "findings": []}\n')
    monkeypatch.chdir(tmp_path)
    args = ["a_moves.py", "b_stays.py", "--format", "json", "-o", "r.json", "--baseline", "accepted.json"]
    assert check_main(args + ["--write-baseline", "new.json"]) == 0
    assert sorted(p.name for p in away.iterdir()) == []
    rep = json.loads((tmp_path / "r.json").read_text())
    # (a test before this one may have run Triton's interpreter in this process: the check then says it moved to a
    # fresh process, which is no problem of the case's)
    assert [p for p in rep["problems"] if "interpreter had run" not in p["message"]] == []
    assert rep["stats"]["cases"] == 3
    assert json.loads((tmp_path / "new.json").read_text())["findings"] == []
    assert os.getcwd() == str(tmp_path)


def test_a_case_that_forks_leaves_one_report_and_an_honest_exit_code(tmp_path):
    f = _file(
        tmp_path,
        "forks.py",
        """
    import multiprocessing


    def _work():
        return 1


    @tritonkit.case(how=["returns", "raises", "exits", "process"])
    def forks(how):
        if how == "process":
            p = multiprocessing.get_context("fork").Process(target=_work)
            p.start()
            p.join()
            return
        pid = os.fork()
        if pid == 0:
            if how == "raises":
                raise RuntimeError("the child's own error")
            if how == "exits":
                raise SystemExit(0)
            return  # the child falls out of the case, back into the checker
        os.waitpid(pid, 0)


    @tritonkit.case(n=[8])
    def too_wide(n):
        _ok_kernel[(1, 70_000)](torch.empty(n, device="meta", dtype=torch.float32), n, BLOCK=64)
    """,
    )
    r = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", f, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(SRC), "TRITON_INTERPRET": "0"},
    )
    rep = json.loads(r.stdout)  # one report: a child that ran on would have printed its own
    assert r.returncode == 1, r.stderr
    assert rep["stats"]["cases"] == 6 and [f["rule"] for f in rep["findings"]] == ["grid-limit"]
    assert [p for p in rep["problems"] if p["fatal"]] == []
    assert "the child's own error" in r.stderr


@pytest.mark.parametrize(
    "grid, words",
    [
        ("(1.5,)", "grid[0] is 1.5, a float, not an integer"),
        ("('8',)", "grid[0] is '8', a str, not an integer"),
        ("(4, n / 64)", "grid[1] is 1.0, a float, not an integer"),
        ("lambda meta: (triton.cdiv(n, 64) * 1.0,)", "grid[0] is 1.0, a float"),
        ("(torch.tensor(2.0),)", "not an integer"),
        ("4", "the grid is 4, a int, not a tuple"),
        ("()", "the grid is empty"),
    ],
)
def test_a_grid_a_gpu_launch_refuses_fails_the_run_naming_the_launch(grid, words, tmp_path):
    f = _file(
        tmp_path,
        "grid_types.py",
        f"""
    @tritonkit.case(n=[64])
    def odd_grid(n):
        x = torch.empty(n, device="meta", dtype=torch.float32)
        _ok_kernel[{grid}](x, n, BLOCK=64)
    """,
    )
    rep = run_check([f], Options(rules=("grid-limit",)))
    (p,) = [p for p in rep.problems if p.fatal]
    assert words in p.message and p.where.endswith(f"grid_types.py:{len(KERNEL.splitlines()) + 5}"), p
    assert rep.exit_code() == 2


def test_a_keyboard_interrupt_raised_by_case_code_is_a_problem_and_the_run_goes_on(tmp_path, capsys):
    raising = _file(
        tmp_path,
        "a_raises.py",
        """
    @tritonkit.case(n=[3])
    def stops(n):
        raise KeyboardInterrupt("the case's own")
    """,
    )
    at_import = _file(tmp_path, "b_raises_at_import.py", "raise KeyboardInterrupt\n")
    wide = _file(
        tmp_path,
        "c_wide.py",
        """
    @tritonkit.case(n=[8])
    def too_wide(n):
        _ok_kernel[(1, 70_000)](torch.empty(n, device="meta", dtype=torch.float32), n, BLOCK=64)
    """,
    )
    assert check_main([raising, at_import, wide, "--format", "json"]) == 2
    rep = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in rep["findings"]] == ["grid-limit"] and rep["stats"]["cases"] == 4
    msgs = {p["where"].split(" ")[0]: p["message"] for p in rep["problems"]}
    assert "KeyboardInterrupt: the case's own" in msgs["stops"]
    assert "failed to import: KeyboardInterrupt" in msgs[at_import]


def test_a_case_keyboard_interrupt_is_reported_where_sigint_is_ignored(tmp_path):
    """A shell starts a script's background jobs with SIGINT ignored: no Ctrl-C can reach the run then, so a
    KeyboardInterrupt the case raises is the case's problem, reported with the rest (it ended the run as
    "interrupted", exit 130 and no report, before)."""
    f = _file(tmp_path, "raises.py", "\n@tritonkit.case(n=[3])\ndef stops(n):\n    raise KeyboardInterrupt('own')\n")
    r = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", f, "--format", "json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(SRC), "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    (p,) = json.loads(r.stdout)["problems"]
    assert p["where"].startswith("stops") and "KeyboardInterrupt: own" in p["message"], p


@pytest.mark.parametrize(
    "body",
    [
        "import itertools\n    sum(itertools.repeat(1))  # a loop in C: no signal handler, no other thread runs",
        "import signal\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    while True:\n        time.sleep(0.01)",
    ],
    ids=["loop_in_c", "own_sigalrm"],
)
def test_a_case_the_alarm_cannot_stop_still_ends_the_run_naming_it(body, tmp_path):
    f = _file(tmp_path, "stuck.py", f"\n@tritonkit.case(n=[5])\ndef stuck(n):\n    {body}\n")
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", f, "--case-timeout", "1", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC), "TRITON_INTERPRET": "0"},
    )
    assert r.returncode == 2 and time.monotonic() - t0 < 60, r.stderr
    assert "stuck (" in r.stderr and "{'n': 5} ran past the 1 s limit (--case-timeout)" in r.stderr


def test_a_thread_a_case_leaves_running_does_not_keep_the_run_alive(tmp_path):
    f = _file(
        tmp_path,
        "threads.py",
        """
    import threading

    @tritonkit.case(n=[5])
    def leaves_a_thread(n):
        threading.Thread(target=time.sleep, args=(3600,)).start()
        ok(n)
    """,
    )
    r = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", f, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC), "TRITON_INTERPRET": "0"},
    )
    assert r.returncode == 0 and json.loads(r.stdout)["stats"]["cases"] == 2, r.stderr

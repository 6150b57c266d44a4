"""Lowering kernels on several processes: the same report as one process, and nothing lost when a worker dies."""

import os
from pathlib import Path

import pytest

from tritonkit.check import Options, run_check
from tritonkit.check.cli import main as check_main
from tritonkit.check.capture.target import Compiler

CORPUS = str(Path(__file__).parent / "realworld" / "rms_norm.py")


def _summary(rep):
    # autotune-cost quotes measured compile seconds; everything else must match exactly
    return (
        [(f.rule, f.file, f.line, f.message) for f in rep.findings if f.rule != "autotune-cost"],
        [(p.kind, p.where, p.message) for p in rep.problems],
        rep.kernels,
    )


@pytest.fixture(scope="module")
def one_process():
    return run_check([CORPUS], Options(disk_cache=False, jobs=1))


def test_several_processes_report_what_one_does(one_process):
    rep = run_check([CORPUS], Options(disk_cache=False, jobs=3))
    assert one_process.findings and rep.stats["compiled_now"] == one_process.stats["compiled_now"] > 3
    assert _summary(rep) == _summary(one_process)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="workers are forks")
def test_a_worker_that_dies_leaves_its_share_to_the_parent(one_process, monkeypatch):
    parent = os.getpid()
    lower = Compiler._lower

    def dying(self, c, args, want_ttgir):
        if os.getpid() != parent:
            os._exit(3)  # a worker crashing in the middle of Triton's frontend
        return lower(self, c, args, want_ttgir)

    monkeypatch.setattr(Compiler, "_lower", dying)
    rep = run_check([CORPUS], Options(disk_cache=False, jobs=2))
    assert _summary(rep) == _summary(one_process)
    assert not [p for p in rep.problems if p.fatal]


def test_jobs_must_be_positive(capsys):
    with pytest.raises(SystemExit) as e:
        check_main([CORPUS, "-j", "0"])
    assert e.value.code == 2
    assert "--jobs: expected a positive number of processes, got '0'" in capsys.readouterr().err

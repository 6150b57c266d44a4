"""``tritonkit tune``: its error paths (one line naming the argument, exit 2) and what it hands the tuner."""

import pytest
import torch

from tritonkit.cli import main as tritonkit_main
from tritonkit.models import MODELS
from tritonkit.tune import cli
from tritonkit.tune import fused_moe as fm


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA device as far as the CLI can tell, and a tuner that records its arguments instead of running."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fm, "tune", lambda *a, **kw: calls.append((a, kw)))
    return calls


def _one_line_error(capsys, argv, *needles):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tritonkit tune: "), err
    for n in needles:
        assert n in err, err
    return err


@pytest.mark.parametrize(
    "argv,needles",
    [
        (["nosuch", "--model", "deepseek-v3"], ("'nosuch'", "tunable: fused_moe")),
        (["rms_norm"], ("'rms_norm'", "tunable: fused_moe")),
        (["fused_moe", "--model", "llama-9000"], ("unknown model 'llama-9000'", "deepseek-v3")),
        (["fused_moe", "--model", "llama3-8b"], ("'llama3-8b' has no layer", "mixtral-8x7b")),
        (["fused_moe", "--model", "deepseek-v3", "--dtype", "float32"], ("'float32'", "bfloat16, float16")),
        (["fused_moe", "--model", "deepseek-v3", "--num-tokens", "0"], ("--num-tokens", "0")),
        (["fused_moe", "--model", "deepseek-v3", "--num-tokens", "x"], ("--num-tokens", "'x'")),
        (["fused_moe", "--model", "deepseek-v3", "--jobs", "-1"], ("--jobs",)),
        (["fused_moe"], ("--model",)),
    ],
    ids=["op", "untunable-op", "model", "dense-model", "dtype", "zero-tokens", "bad-int", "jobs", "no-model"],
)
def test_bad_arguments_are_named_on_one_line(capsys, gpu, argv, needles):
    _one_line_error(capsys, argv, *needles)
    assert gpu == []


def test_no_gpu_is_one_clear_line(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _one_line_error(capsys, ["fused_moe", "--model", "deepseek-v3"], "no CUDA GPU")


def test_the_tuner_gets_the_arguments(gpu, tmp_path):
    argv = [
        "tune",
        "fused_moe",
        "--model",
        "qwen3-30b-a3b",
        "--dtype",
        "float16",
        "--num-tokens",
        "1",
        "64",
        "--out",
        str(tmp_path),
        "--progress",
        str(tmp_path / "p.json"),
        "--budget-s",
        "5",
        "--jobs",
        "3",
    ]
    assert tritonkit_main(argv) == 0
    ((args, kw),) = gpu
    assert args == (MODELS["qwen3-30b-a3b"], torch.float16)
    assert kw == {
        "num_tokens": [1, 64],
        "out_dir": str(tmp_path),
        "progress": str(tmp_path / "p.json"),
        "budget_s": 5.0,
        "jobs": 3,
    }


def test_defaults_are_the_tuners(gpu):
    assert cli.main(["fused_moe", "--model", "deepseek-v3"]) == 0
    ((args, kw),) = gpu
    assert args[1] == torch.bfloat16 and "num_tokens" not in kw  # tune's own DEFAULT_BUCKETS
    assert kw["out_dir"] is None and kw["jobs"] is None and kw["budget_s"] == fm.BUDGET_S


def test_an_interrupt_exits_130_and_says_how_to_resume(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(fm, "tune", interrupted)
    assert cli.main(["fused_moe", "--model", "mixtral-8x7b"]) == 130
    assert "rerun the same command to resume" in capsys.readouterr().err


def test_help_names_the_default_buckets(capsys):
    assert cli.main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert " ".join(map(str, fm.DEFAULT_BUCKETS)) in out and "16384" in out and "32768" not in out

"""tritonkit bench builds its run's config once from the arguments, refusing each bad one by name before any
timing, and before it looks for a GPU (no GPU needed to build it)."""

import pytest
import torch

from tritonkit.bench import cli
from tritonkit.bench.runner import POINT_BUDGET_S


def _config(*argv):
    return cli._config(cli._parser().parse_args(list(argv)))


def test_the_config_holds_every_argument_when_built():
    cfg = _config(
        "rms_norm", "--dtype", "float16", "bfloat16", "--num-tokens", "1", "8", "--point-budget", "2.5"
    )  # fmt: skip
    assert [t.name for t in cfg.targets] == ["rms_norm"] and cfg.dtypes == [torch.float16, torch.bfloat16]
    assert cfg.num_tokens == [1, 8] and cfg.point_budget_s == 2.5 and cfg.base is None
    assert _config("rms_norm").point_budget_s == POINT_BUDGET_S
    # without --base nothing is checked out
    assert cli._with_base(cfg, cli._parser().parse_args(["rms_norm"])) == (cfg, None)


@pytest.mark.parametrize(
    "argv, says",
    [
        (("rms_nrom",), "unknown op 'rms_nrom'"),
        (("rms_norm", "--dtype", "float17"), "--dtype: unknown dtype 'float17'"),
        (("rms_norm", "--dtype", "float8"), "--dtype: unknown dtype 'float8'"),
        (("rms_norm", "--dtype", "float64"), "--dtype: no op here supports float64"),
        (("rms_norm", "--models", "gpt-9"), "--models: unknown model 'gpt-9'"),
        (("rms_norm", "--providers", "tensorrt"), "--providers: unknown provider 'tensorrt'"),
        (("rms_norm", "--point-budget", "0"), "--point-budget must be a positive number"),
        (("rms_norm", "--num-tokens", "16", "0"), "--num-tokens: a number of tokens is at least 1, got 0"),
        (("rms_norm", "--num-tokens", "-3"), "--num-tokens: a number of tokens is at least 1, got -3"),
        (("rms_norm", "--repeats", "0"), "--repeats must be at least 1"),
        (("rms_norm", "--deadline", "0"), "--deadline must be a positive number of seconds"),
        (("rms_norm", "--deadline", "nan"), "--deadline must be a positive number of seconds"),
        (("rms_norm", "--series", "decode-4k"), "--series: rms_norm has no named series"),
        (("paged_attention", "--series", "nope"), "paged_attention has no series 'nope'"),
        (("rms_norm", "--base-retime"), "--base-retime applies only with --base"),
    ],
)
def test_a_bad_argument_is_refused_by_name(argv, says):
    with pytest.raises(cli._Refused, match=says.replace("(", r"\(")):
        _config(*argv)


def test_an_out_or_record_that_is_no_folder_is_refused(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("keep")
    for flag in ("--out", "--record"):
        with pytest.raises(cli._Refused, match=f"{flag} {f}: it is not a folder"):
            _config("rms_norm", flag, str(f))
    assert f.read_text() == "keep"


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU answers")
@pytest.mark.parametrize(
    "argv, says",
    [
        (["nope"], "unknown op 'nope'"),
        (["rms_norm", "--models", "nope"], "--models: unknown model 'nope'"),
        (["rms_norm", "--dtype", "float8"], "--dtype: unknown dtype 'float8'"),
        (["rms_norm", "--num-tokens", "0"], "--num-tokens"),
        (["rms_norm", "--providers", "nope"], "--providers: unknown provider 'nope'"),
    ],
)
def test_on_a_cpu_a_bad_argument_is_named_before_the_missing_gpu(argv, says, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "no CUDA GPU" not in err and err.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU answers")
def test_on_a_cpu_good_arguments_get_the_missing_gpu_and_nothing_is_made(tmp_path, capsys):
    record = tmp_path / "results"
    assert cli.main(["rms_norm", "--num-tokens", "1", "--record", str(record), "--out", str(tmp_path / "o")]) == 2
    assert "no CUDA GPU found" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_record_dir_holding_another_table_is_refused(tmp_path):
    (tmp_path / "bench.csv").write_text("a,b,c\n")
    with pytest.raises(cli._Refused, match="other columns than a bench table"):
        cli._check_record_dir(str(tmp_path))
    cli._check_record_dir(str(tmp_path / "fresh"))  # made, nothing else
    assert (tmp_path / "fresh").is_dir() and not any((tmp_path / "fresh").iterdir())

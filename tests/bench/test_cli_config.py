"""tritonkit bench builds its run's config once from the arguments, refusing each bad one by name before any
timing (no GPU needed to build it)."""

import pytest
import torch

from tritonkit.bench import cli
from tritonkit.bench.runner import POINT_BUDGET_S


def _config(*argv):
    return cli._config(cli._parser().parse_args(list(argv)))


def test_the_config_holds_every_argument_when_built():
    cfg, base_cache = _config(
        "rms_norm", "--dtype", "float16", "bfloat16", "--num-tokens", "1", "8", "--point-budget", "2.5"
    )  # fmt: skip
    assert [t.name for t in cfg.targets] == ["rms_norm"] and cfg.dtypes == [torch.float16, torch.bfloat16]
    assert cfg.num_tokens == [1, 8] and cfg.point_budget_s == 2.5 and cfg.base is None and base_cache is None
    assert _config("rms_norm")[0].point_budget_s == POINT_BUDGET_S


@pytest.mark.parametrize(
    "argv, says",
    [
        (("rms_nrom",), "unknown op 'rms_nrom'"),
        (("rms_norm", "--dtype", "float17"), "unknown dtype 'float17'"),
        (("rms_norm", "--models", "gpt-9"), "unknown model 'gpt-9'"),
        (("rms_norm", "--providers", "tensorrt"), "--providers: unknown provider 'tensorrt'"),
        (("rms_norm", "--point-budget", "0"), "--point-budget must be a positive number"),
    ],
)
def test_a_bad_argument_is_refused_by_name(argv, says):
    with pytest.raises(cli._Refused, match=says.replace("(", r"\(")):
        _config(*argv)


def test_a_record_dir_holding_another_table_is_refused(tmp_path):
    (tmp_path / "bench.csv").write_text("a,b,c\n")
    with pytest.raises(cli._Refused, match="other columns than a bench table"):
        cli._check_record_dir(str(tmp_path))
    cli._check_record_dir(str(tmp_path / "fresh"))  # made, nothing else
    assert (tmp_path / "fresh").is_dir() and not any((tmp_path / "fresh").iterdir())

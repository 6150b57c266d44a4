"""tritonkit tune fused_moe on a real GPU: a short tune of two buckets, its table read back by the op.
``PYTHONPATH=src python3 -m pytest -q -m gpu tests/tune``."""

import pytest
import torch

from tritonkit.models import MODELS
from tritonkit.ops.fused_moe import config as C
from tritonkit.tune import fused_moe as T
from tritonkit.tune.space import Space

# shares the card under pytest-xdist (tests/gpu_share.py): it asserts the table written and read, not its timings
pytestmark = pytest.mark.gpu

# a few tiles of each kind: the full space's compiles took 166-304 s of the GPU fast tier for a round trip of a table
SMALL = Space(block_m=(16, 64), block_n=(64, 128), block_k=(64,), group_m=(1,), num_warps=(4,), num_stages=(3,))


def test_short_tune_writes_a_table_the_op_reads(tmp_path):
    model = MODELS["qwen3-30b-a3b"]
    path = T.tune(model, torch.bfloat16, num_tokens=[1, 256], out_dir=tmp_path, budget_s=5.0, jobs=2, space=SMALL)
    assert path.exists() and path.parent == tmp_path
    name = torch.cuda.get_device_name()
    for m in (1, 256):
        got = C.lookup(
            m,
            model.num_experts,
            model.moe_intermediate,
            model.hidden,
            "bfloat16",
            "none",
            name,
            config_dir=str(tmp_path),
        )
        assert got is not None
        C.validate(got, "none")
    # a rerun finds both buckets done and times nothing
    again = T.tune(
        model,
        torch.bfloat16,
        num_tokens=[1, 256],
        out_dir=tmp_path,
        budget_s=5.0,
        jobs=0,
        space=SMALL,
        timer=lambda *a: pytest.fail("a finished bucket was timed again"),
    )
    assert again == path

"""One compile per (dtype, model config) over the whole num_tokens sweep, for the ops whose own test files do not
already check it (rotary_embedding and silu_and_mul do): launches recorded on meta tensors, keys computed as
Triton would for sm_90."""

import importlib

import pytest
import torch
from compile_keys import Recorder, specialization_keys

from tritonkit.models import MODELS, NUM_TOKENS_SWEEP
from tritonkit.ops import get_spec
from tritonkit.testing import MetaFill

OPS = {"rms_norm": "_rms_norm_fwd_kernel", "reshape_and_cache": "_reshape_and_cache_kernel"}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", OPS)
def test_one_compile_across_num_tokens(monkeypatch, name, dtype):
    api = importlib.import_module(f"tritonkit.ops.{name}.api")
    kernel = getattr(api, OPS[name])
    spec = get_spec(name)
    for model in MODELS.values():
        rec = Recorder()
        monkeypatch.setattr(api, OPS[name], rec)
        for t in NUM_TOKENS_SWEEP:
            spec.call(spec.make_inputs(spec.sweep_shape(model, t), dtype, MetaFill()))
        assert len(rec.launches) == len(NUM_TOKENS_SWEEP)
        # the grid grows on grid[0] only; grid[1], where used, is fixed by the model
        grids = [tuple(g) + (1, 1) for g, _, _ in rec.launches]
        assert len({g[1:3] for g in grids}) == 1 and max(g[1] for g in grids) <= 65535
        keys = specialization_keys(kernel, rec.launches)
        assert len(keys) == 1, f"{name} on {model.name}: {len(keys)} compiles over num_tokens {NUM_TOKENS_SWEEP}"

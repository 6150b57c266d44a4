"""paged_attention's host path: what a repeated eager call skips (layout checks, launch plans) and what it must not
(checks of data pointers, grad state and new layouts). docs/notes/paged-attention-host.md has the numbers."""

import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import _checks, get_spec, paged_attention
from tritonkit.ops.paged_attention import api, config
from tritonkit.spec import Shape
from tritonkit.testing import Fill

SPEC = get_spec("paged_attention")
SHAPE = Shape(num_seqs=2, q_len=(1, 5), context=(20, 3), num_heads=4, num_kv_heads=2, head_dim=32, block_size=16)


def _args(**changes) -> dict:
    inp = SPEC.make_inputs(SHAPE, torch.bfloat16, Fill("randn", DEVICE, 0))
    args = dict(
        q=inp["q"],
        k_cache=inp["k_cache"],
        v_cache=inp["v_cache"],
        cu_seqlens_q=inp["cu_seqlens_q"],
        seqused_k=inp["seqused_k"],
        block_table=inp["block_table"],
        max_seqlen_q=inp["max_seqlen_q"],
        max_seqlen_k=inp["max_seqlen_k"],
        softmax_scale=None,
        causal=True,
        window_size=(-1, -1),
        softcap=0.0,
        sinks=None,
        out=None,
        k_scale=None,
        v_scale=None,
    )
    args.update(changes)
    return args


def _check(args: dict) -> None:
    api.check_args(**args)


@pytest.fixture
def layout_checks(monkeypatch):
    """Counts the calls of check_args' metadata checks, from an empty memo."""
    calls = []
    real = api._check_cache
    monkeypatch.setattr(api, "_CHECKED", _checks.CheckedLayouts())
    monkeypatch.setattr(api, "_check_cache", lambda *a: (calls.append(a), real(*a)))
    return calls


def test_a_repeated_layout_skips_the_metadata_checks(layout_checks):
    args = _args()
    _check(args)
    _check(args)
    _check(_args())  # new tensors, the same layout
    assert len(layout_checks) == 1
    # any change a check reads is a new key: a shape, a scalar, its type, an optional tensor
    changes = [
        dict(max_seqlen_k=args["max_seqlen_k"] + 1),
        dict(softcap=1.0),
        dict(softmax_scale=0.5),
        dict(window_size=[4, 0]),
        dict(sinks=torch.zeros(4, device=DEVICE)),
        dict(out=torch.empty_like(args["q"])),
        dict(block_table=torch.cat([args["block_table"]] * 2, dim=1)),
    ]
    for i, change in enumerate(changes):
        _check(_args(**change))
        assert len(layout_checks) == 2 + i, change


@pytest.mark.parametrize(
    "change, exc, needle",
    [
        # same shapes as the good call, other strides: the strided views the kernels cannot read
        (
            lambda a: dict(q=torch.empty(6, 32, 4, dtype=torch.bfloat16, device=DEVICE).transpose(1, 2)),
            ValueError,
            "q must be contiguous",
        ),
        (
            lambda a: dict(block_table=a["block_table"].repeat_interleave(2, dim=1)[:, ::2]),
            ValueError,
            "block_table must be contiguous",
        ),
        (lambda a: dict(seqused_k=a["seqused_k"].repeat_interleave(2)[::2]), ValueError, "seqused_k"),
        # equal to a good value, another type: True == 1, 1 == 1.0
        (lambda a: dict(causal=1), TypeError, "causal"),
        (lambda a: dict(max_seqlen_q=True), TypeError, "max_seqlen_q"),
        (lambda a: dict(max_seqlen_k=float(a["max_seqlen_k"])), TypeError, "max_seqlen_k"),
        (lambda a: dict(window_size=(-1, True)), TypeError, "window_size"),
        (lambda a: dict(softmax_scale=float("nan")), ValueError, "softmax_scale"),
        (lambda a: dict(q=a["q"].to(torch.float32)), TypeError, "q"),
    ],
    ids=["q-strides", "block_table-strides", "seqused_k-strides", "causal-int", "max_q-bool", "max_k-float",
         "window-bool", "scale-nan", "q-dtype"],
)  # fmt: skip
def test_a_bad_argument_after_a_good_call_still_raises(layout_checks, change, exc, needle):
    good = _args()
    _check(good)
    _check(good)
    with pytest.raises(exc, match=needle):
        _check(_args(**change(good)))
    with pytest.raises(exc, match=needle):  # and again: a failed check is not remembered
        _check(_args(**change(good)))


def test_data_pointer_and_grad_checks_run_on_every_call(layout_checks):
    args = _args(out=torch.empty(6, 4, 32, dtype=torch.bfloat16, device=DEVICE))
    _check(args)
    # out the same layout as the good out, but q's memory
    with pytest.raises(ValueError, match="out must not overlap q"):
        _check(dict(args, out=args["q"]))
    with pytest.raises(ValueError, match="out must not have elements that share memory"):
        _check(dict(args, out=torch.empty(1, 4, 32, dtype=torch.bfloat16, device=DEVICE).expand(6, 4, 32)))
    q = args["q"].clone().requires_grad_()
    with torch.no_grad():
        _check(dict(args, q=q))
    with pytest.raises(RuntimeError, match="q requires grad"):
        _check(dict(args, q=q))
    assert len(layout_checks) == 2  # the expanded out is a layout of its own


def test_a_remembered_layout_still_finds_an_out_that_meets_an_input(layout_checks):
    # the layout keeps each tensor's extent, and a call compares data pointers alone: q and out as neighbours in one
    # buffer pass, out half over q is refused, each with the layout of the first call
    args = _args(out=torch.empty(6, 4, 32, dtype=torch.bfloat16, device=DEVICE))
    _check(args)
    n = args["q"].numel()
    buf = torch.empty(3 * n, dtype=torch.bfloat16, device=DEVICE)
    q = buf[:n].view(6, 4, 32).copy_(args["q"])
    _check(dict(args, q=q, out=buf[n : 2 * n].view(6, 4, 32)))
    with pytest.raises(ValueError, match="out must not overlap q"):
        _check(dict(args, q=q, out=buf[n // 2 : n // 2 + n].view(6, 4, 32)))
    assert len(layout_checks) == 1


def test_the_op_refuses_a_bad_stride_after_a_good_call():
    # through the public call, kernels included: a call that passed leaves no hole for a strided q of its shape
    args = _args()
    kw = {k: v for k, v in args.items() if k not in ("q", "k_cache", "v_cache")}
    paged_attention(args["q"], args["k_cache"], args["v_cache"], **kw)
    strided = torch.zeros(6, 32, 4, dtype=torch.bfloat16, device=DEVICE).transpose(1, 2)
    with pytest.raises(ValueError, match="q must be contiguous in its last dimension"):
        paged_attention(strided, args["k_cache"], args["v_cache"], **kw)


def test_checked_layouts_are_bounded():
    memo = _checks.CheckedLayouts(maxsize=3)
    for i in range(10):
        memo.add((i,))
        assert (i,) in memo and len(memo.keys) <= 3
    assert not memo.add(None) and None not in memo
    # a key that cannot be hashed (a symbolic shape) is neither kept nor found: its call checks everything
    memo.add((10,))
    memo.add((11,))
    assert len(memo.keys) == 3
    unhashable = _checks.hashable_key(lambda: ([1], 2))
    assert not memo.add(unhashable) and memo.get(unhashable) is None and unhashable not in memo
    assert len(memo.keys) == 3  # a full memo keeps what it holds
    assert _checks.hashable_key(lambda: ((1,), 2)) == ((1,), 2)


def test_launch_plans_are_remembered_until_a_name_of_config_changes(monkeypatch):
    args = (4, 128, 2, 1, 1, 8, 1, 4096, 132)  # Llama-3-8B heads, decode of one sequence over 4K keys
    plan = config.launch_plan(*args)
    assert config.launch_plan(*args) is plan and plan.decode.num_splits == 32
    # a patched threshold holds from the next call on, and so does its undo
    monkeypatch.setattr(config, "MIN_KEYS_PER_SPLIT", 1024)
    assert config.launch_plan(*args).decode.num_splits == 4
    monkeypatch.undo()
    assert config.launch_plan(*args) == plan


def test_launch_plan_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(config, "PLAN_MEMO_SIZE", 5)
    for keys in range(1000, 1020):
        plan = config.launch_plan(4, 128, 2, 1, 1, 8, 1, keys, 132)
        assert plan == config._plan(4, 128, 2, 1, 1, 8, 1, keys, 132)
        assert len(config._PLANS) <= 5


def test_no_layout_key_while_torch_compile_traces():
    # Dynamo cannot trace hash() of a tuple (the H200's torch.compile test of paged_attention failed on it): a
    # traced call takes no key, so it checks everything at trace time
    def f(x):
        key = _checks.hashable_key(lambda: (_checks.layout(x), 3))
        return x + (1 if key is None else 2)

    x = torch.ones(2)
    assert torch.equal(f(x), x + 2)
    assert torch.equal(torch.compile(f, fullgraph=True, backend="eager")(x), x + 1)

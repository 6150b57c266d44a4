"""paged_attention's launches recorded per checked layout and repeated with a call's tensors (api's Replay), without
a GPU: the op's kernels become JITFunctions whose compile returns a stand-in with a recording launcher, on the
checker's sm_90 stub driver, with CPU tensors taking the fast launch path (as tests/ops/test_launch.py does). A call
that repeats its layout's launches makes no launch key (``_launch._prepare``); anything the key leaves out that
Triton specializes on, or that must see every launch, takes the normal path."""

import importlib
import types

import pytest
import torch
from triton import knobs
from triton.compiler.compiler import CompiledKernel
from triton.runtime.jit import JITFunction

from tritonkit.check.capture.target import interpreter_off, parse_arch, stub_driver
from tritonkit.ops import _launch, get_spec, paged_attention
import tritonkit
from tritonkit.ops.paged_attention import api, config
from tritonkit.spec import Shape
from tritonkit.testing import Fill

SPEC = get_spec("paged_attention")
KERNELS = (
    "_paged_attention_decode_kernel",
    "_paged_attention_merge_kernel",
    "_paged_attention_prefill_kernel",
    "_paged_attention_prefill_merge_kernel",
)
TARGET = parse_arch("sm_90")
# one sequence over 4K keys: a split decode and its merge (two launches)
DECODE = Shape(num_seqs=1, q_len=1, context=4095, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16)
PROMPT = Shape(num_seqs=1, q_len=16, context=0, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16)
# the launcher's leading arguments: grid x, y, z, stream, function, packed metadata, launch metadata, two hooks
HEAD = 9


class _Stand(CompiledKernel):
    """A compiled kernel that records its launches; ``function`` names its kernel and specialization."""

    def __init__(self, name: str, key, launches: list):
        self.metadata = types.SimpleNamespace(target=TARGET, name=name)
        self.name = name
        self.module = object()  # handles "loaded": run does not load a binary
        self.function = (name, key)
        self.packed_metadata = ()
        self.src = None
        self._run = lambda *a: launches.append(a)


class _Op:
    """The op on the stub driver: its launches (launcher arguments), compiles, and launch keys taken."""

    def __init__(self, monkeypatch):
        self.launches, self.compiles, self.keys, self.replays = [], [], 0, 0
        for n in KERNELS:
            monkeypatch.setattr(api, n, self._jit(n, getattr(api, n)))
        prepare, launch_bound = _launch._prepare, _launch.launch_bound

        def counted_prepare(*a, **kw):
            self.keys += 1
            return prepare(*a, **kw)

        def counted_launch_bound(*a, **kw):
            done = launch_bound(*a, **kw)
            self.replays += done
            return done

        monkeypatch.setattr(_launch, "_prepare", counted_prepare)
        monkeypatch.setattr(_launch, "launch_bound", counted_launch_bound)
        monkeypatch.setattr(_launch, "_DEVICE_TENSOR", "is_cpu")

    def _jit(self, name: str, k):
        j = k if isinstance(k, JITFunction) else JITFunction(k.fn, do_not_specialize=k.kwargs.get("do_not_specialize"))

        def do_compile(key, signature, device, constexprs, options, attrs, warmup):
            self.compiles.append((name, key))
            compiled = j.device_caches[device][0][key] = _Stand(name, key, self.launches)
            return compiled

        j._do_compile = do_compile
        return j

    def call(self, inp: dict, **changes) -> tuple[str, list]:
        """One eager call: ("memo" where it repeated recorded launches and made no launch key, else "normal") and
        its launcher calls."""
        kw = {n: inp[n] for n in ("cu_seqlens_q", "seqused_k", "block_table", "max_seqlen_q", "max_seqlen_k")}
        kw.update(changes)
        n, keys, replays = len(self.launches), self.keys, self.replays
        self.out = paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **kw)
        memo = self.keys == keys and self.replays == replays + 1
        return ("memo" if memo else "normal"), self.launches[n:]


@pytest.fixture
def op(monkeypatch):
    # the binder imports gluon on first use, which asserts the interpreter's state: import it as the suite runs
    importlib.import_module("triton.experimental.gluon")
    with stub_driver(TARGET), interpreter_off():
        yield _Op(monkeypatch)


def _inputs(shape=DECODE, seed=0) -> dict:
    return SPEC.make_inputs(shape, torch.bfloat16, Fill("randn", torch.device("cpu"), seed))


def _args(launch) -> tuple:
    return launch[HEAD:]


def test_a_repeated_layout_launches_the_same_kernels_with_the_new_tensors(op):
    first, second = _inputs(seed=0), _inputs(seed=1)
    path, before = op.call(first)
    assert path == "normal" and len(before) == 2  # the split decode and its merge
    assert op.call(first)[0] == "memo"
    path, after = op.call(second)
    assert path == "memo" and len(op.compiles) == 2
    dec, merge = after
    # the same compiled kernels, grids and packed metadata; the stream read now
    for a, b in zip(before, after):
        assert a[:3] == b[:3] and a[4:6] == b[4:6] and b[6:9] == (None, None, None)
    # the new call's tensors as their data pointers (ints, which the launcher takes as they are), the returned out
    # and fresh split scratch; every other argument as the first call's
    q, k, v, out, acc, m, s, cu, used, table = _args(dec)[:10]
    names = ("q", "k_cache", "v_cache", "cu_seqlens_q", "seqused_k", "block_table")
    assert all(type(x) is int for x in (q, k, v, out, acc, m, s, cu, used, table))
    assert [q, k, v, cu, used, table] == [second[n].data_ptr() for n in names]
    assert out == op.out.data_ptr() and out != _ptr(_args(before[0])[3])
    assert list(_args(merge)[:5]) == [out, acc, m, s, cu]
    assert _args(dec)[13:] == _args(before[0])[13:] and _args(merge)[7:] == _args(before[1])[7:]


def _ptr(x) -> int:
    return x if type(x) is int else x.data_ptr()


def test_a_pointer_of_another_alignment_takes_the_normal_path(op):
    inp = _inputs()
    op.call(inp)
    assert op.call(inp)[0] == "memo"
    # q's layout, 8 bytes past a 16-byte boundary: Triton specializes on it, so a kernel of its own
    buf = torch.empty(inp["q"].numel() + 4, dtype=inp["q"].dtype)[4:]
    q = buf.view(inp["q"].shape).copy_(inp["q"])
    assert q.data_ptr() % 16 == 8 and q.stride() == inp["q"].stride()
    path, launches = op.call(dict(inp, q=q))
    assert path == "normal" and len(op.compiles) == 3
    assert launches[0][4] != op.launches[0][4] and _args(launches[0])[0] is q
    assert op.call(dict(inp, q=q))[0] == "memo"


@pytest.mark.parametrize(
    "change",
    [
        lambda inp: dict(softmax_scale=0.5),
        lambda inp: dict(softcap=30.0),
        lambda inp: dict(window_size=(256, -1)),
        lambda inp: dict(max_seqlen_k=inp["max_seqlen_k"] // 2),
    ],
    ids=["scale", "softcap", "window", "max_seqlen_k"],
)
def test_a_changed_scalar_is_a_layout_of_its_own(op, change):
    inp = _inputs()
    _, base = op.call(inp)
    assert op.call(inp)[0] == "memo"
    path, launches = op.call(inp, **change(inp))
    assert path == "normal" and _args(launches[0])[13:] != _args(base[0])[13:]
    path, again = op.call(inp, **change(inp))
    assert path == "memo" and _args(again[0])[13:] == _args(launches[0])[13:]
    assert op.call(inp)[0] == "memo"  # the first layout's entry is still there


def test_a_changed_stride_is_a_layout_of_its_own(op):
    inp = _inputs()
    op.call(inp)
    # the same caches as views of a joint [num_blocks, 2, block_size, Hkv, D] cache: k_cache.stride(0) doubles
    joint = torch.stack([inp["k_cache"], inp["v_cache"]], dim=1)
    k, v = joint[:, 0], joint[:, 1]
    assert k.shape == inp["k_cache"].shape and k.stride(0) == 2 * inp["k_cache"].stride(0)
    path, launches = op.call(dict(inp, k_cache=k, v_cache=v))
    assert path == "normal" and k.stride(0) in _args(launches[0])[13:]
    assert op.call(dict(inp, k_cache=k, v_cache=v))[0] == "memo"


def test_an_overridden_config_name_drops_the_recorded_launches(op):
    inp = _inputs()
    _, base = op.call(inp)
    assert op.call(inp)[0] == "memo"
    splits = base[0][2]
    with tritonkit.ops.overrides(config, MIN_KEYS_PER_SPLIT=4 * config.MIN_KEYS_PER_SPLIT):
        path, launches = op.call(inp)
        assert path == "normal" and launches[0][2] < splits  # the overridden threshold holds
        assert op.call(inp)[0] == "memo"
    path, launches = op.call(inp)
    assert path == "normal" and launches[0][2] == splits


def test_clear_caches_drops_the_recorded_launches_a_plain_rebind_keeps(op):
    inp = _inputs()
    _, base = op.call(inp)
    old = config.MIN_KEYS_PER_SPLIT
    try:
        # a name rebound without overrides is not seen while the layout's launches are recorded ...
        config.MIN_KEYS_PER_SPLIT = 4 * old
        path, launches = op.call(inp)
        assert path == "memo" and launches[0][2] == base[0][2]
        # ... until the memos are emptied
        tritonkit.ops.clear_caches()
        path, launches = op.call(inp)
        assert path == "normal" and launches[0][2] < base[0][2]
    finally:
        config.MIN_KEYS_PER_SPLIT = old
        tritonkit.ops.clear_caches()


def test_a_rebound_api_name_drops_the_recorded_launches(op, monkeypatch):
    # tests observe launches by patching api.launch: once patched, no call bypasses it
    inp = _inputs()
    op.call(inp)
    assert op.call(inp)[0] == "memo"
    seen = []
    real = api.launch
    monkeypatch.setattr(api, "launch", lambda kernel, *a, **kw: (seen.append(kernel), real(kernel, *a, **kw))[1])
    for _ in range(2):
        op.call(inp)
    assert seen == [api._paged_attention_decode_kernel, api._paged_attention_merge_kernel] * 2


def test_a_prompt_repeats_its_one_launch(op):
    inp = _inputs(PROMPT)
    _, base = op.call(inp)
    path, launches = op.call(_inputs(PROMPT, seed=1))
    assert path == "memo" and len(launches) == len(base) == 1 and launches[0][4][0] == "_paged_attention_prefill_kernel"


def _hook_chain(m):
    m.setattr(knobs.runtime.launch_enter_hook, "calls", [lambda *a: None])


def _fast_path_off(m):
    m.setattr(_launch, "_enabled", False)


def _run_patched(m):
    m.setattr(JITFunction, "run", lambda self, *a, **kw: None)  # what tritonkit check's Capture does


def _pre_run_hook(m):
    m.setattr(api._paged_attention_merge_kernel, "pre_run_hooks", [lambda *a, **kw: None])


@pytest.mark.parametrize(
    "guard", [_hook_chain, _fast_path_off, _run_patched, _pre_run_hook],
    ids=["launch-hook", "fast-path-off", "run-patched", "pre-run-hook"],
)  # fmt: skip
def test_what_must_see_every_launch_takes_the_normal_path(op, monkeypatch, guard):
    inp = _inputs()
    op.call(inp)
    assert op.call(inp)[0] == "memo"
    with monkeypatch.context() as m:
        guard(m)
        assert op.call(inp)[0] == "normal"
        assert op.call(inp)[0] == "normal"
    assert op.call(inp)[0] == "memo"


def test_another_current_device_takes_the_normal_path(op, monkeypatch):
    # Triton keeps one cache per device, the current one: a kernel recorded on device 0 does not launch on device 1
    inp = _inputs()
    op.call(inp)
    assert op.call(inp)[0] == "memo"
    with monkeypatch.context() as m:
        m.setattr(_launch._T.driver.active, "get_current_device", lambda: 1)
        assert op.call(inp)[0] == "normal" and len(op.compiles) == 4
        assert op.call(inp)[0] == "memo"
    assert op.call(inp)[0] == "normal" and len(op.compiles) == 4
    assert op.call(inp)[0] == "memo"


def test_a_cleared_triton_cache_compiles_again(op):
    inp = _inputs()
    op.call(inp)
    assert op.call(inp)[0] == "memo"
    api._paged_attention_decode_kernel.device_caches.clear()
    assert op.call(inp)[0] == "normal" and len(op.compiles) == 3
    assert op.call(inp)[0] == "memo"


def test_the_memo_is_bounded_by_the_checked_layouts(op, monkeypatch):
    monkeypatch.setattr(api, "_CHECKED", api._checks.CheckedLayouts(maxsize=2))
    for ctx in (4000, 4001, 4002, 4000):
        op.call(_inputs(Shape(DECODE, context=ctx)))
        assert len(api._CHECKED.keys) <= 2
    assert op.call(_inputs(Shape(DECODE, context=4000)))[0] == "memo"


def test_the_split_scratch_is_one_allocation_at_aligned_offsets(op):
    # an allocation is a few us of host time: one buffer, split at 16-byte boundaries, each part as large as the
    # decode kernel writes (rows of head_dim accumulators, a maximum and a sum per row)
    inp = _inputs()
    heads, kv = DECODE["num_heads"], DECODE["num_kv_heads"]
    sms = config.num_sms("cpu")
    plan = config.launch_plan(heads // kv, DECODE["head_dim"], 2, 1, 1, kv, 1, inp["max_seqlen_k"], sms)
    rows = kv * plan.decode.block_m * plan.decode.num_splits
    p, (dec, _) = op.call(inp)
    acc, m, s = _args(dec)[4:7]
    assert p == "normal" and dec[2] == plan.decode.num_splits > 1
    assert len({t.untyped_storage().data_ptr() for t in (acc, m, s)}) == 1
    assert all(t.dtype == torch.float32 and t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (acc, m, s))
    assert acc.numel() >= rows * DECODE["head_dim"] and m.numel() >= rows and s.numel() >= rows
    # a repeat passes the parts' pointers into one float32 allocation of its own
    p, (dec, _) = op.call(inp)
    acc, m, s = _args(dec)[4:7]
    (replay,) = [v.replay for v in api._CHECKED.keys.values() if v.replay is not None]
    assert p == "memo" and all(type(x) is int and x % 16 == 0 for x in (acc, m, s))
    assert m - acc >= 4 * rows * DECODE["head_dim"] and s - m >= 4 * rows
    assert s - acc + 4 * rows <= 4 * replay.scratch_elems


def test_a_mixed_batch_repeats_both_paths_with_one_scratch_allocation(op):
    # decode sequences and a prompt in one call: a split decode with its merge, then the prefill; the parts of both
    # paths' scratch lie in one allocation, none overlapping another
    shape = Shape(DECODE, num_seqs=3, q_len=(1, 1, 40), context=(4095, 2000, 0))
    inp = _inputs(shape)
    path, before = op.call(inp)
    merges = {"_paged_attention_merge_kernel", "_paged_attention_prefill_merge_kernel"}
    assert path == "normal" and merges <= {b[4][0] for b in before}
    path, after = op.call(_inputs(shape, seed=1))
    assert path == "memo" and [a[4] for a in after] == [b[4] for b in before]
    parts = {}
    for a, b in zip(before, after):
        kernel = a[4][0]
        for x, y in zip(_args(a), _args(b)):
            if isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.numel() > 1:
                parts[(kernel, y)] = x.numel() * 4  # a split part: its pointer now, its size when recorded
    spans = sorted({(ptr, ptr + size) for (_, ptr), size in parts.items()})
    assert len(spans) == 6 and all(lo % 16 == 0 for lo, _ in spans)
    assert all(hi <= lo2 for (_, hi), (lo2, _) in zip(spans, spans[1:]))


# a chunk of 128 queries over 4K keys at Llama-3-8B heads: on sm_90 the Hopper prefill (a Gluon kernel with the
# caches as TMA descriptors) and its split merge
CHUNK = Shape(num_seqs=1, q_len=128, context=4096 - 128, num_heads=32, num_kv_heads=8, head_dim=128, block_size=16)


@pytest.fixture
def hopper_op(op, monkeypatch):
    from tritonkit.ops.paged_attention import kernel_hopper

    k = kernel_hopper._paged_attention_prefill_hopper_kernel
    # a kernel object of this test's own (its compile cache holds this test's stand-ins only)
    fresh = type(k)(k.fn, do_not_specialize=k.do_not_specialize)
    monkeypatch.setattr(kernel_hopper, "_paged_attention_prefill_hopper_kernel", op._jit("hopper", fresh))
    # the stub sm_90 target with CPU tensors: what _hopper_ok decides from a CUDA tensor's capability
    monkeypatch.setattr(api, "_hopper_ok", lambda a, group, cap: a.k_cache.dtype == torch.bfloat16)
    tritonkit.ops.clear_caches()  # no layout recorded with another test's kernels
    yield op
    tritonkit.ops.clear_caches()


def _desc_fields(d) -> tuple:
    return (d.shape, d.strides, d.block_shape, d.layout)


def test_a_repeated_hopper_layout_builds_its_descriptors_from_the_new_caches(hopper_op):
    # the fixed tile order (the counter's own test follows): under 3.9 this layout runs persistent programs, which
    # take a fresh counter a call by default
    with tritonkit.ops.overrides(config, PREFILL_HOPPER_DYNAMIC=False):
        _descriptors_from_the_new_caches(hopper_op)


def _descriptors_from_the_new_caches(hopper_op):
    op = hopper_op
    first, second = _inputs(CHUNK, seed=0), _inputs(CHUNK, seed=1)
    path, before = op.call(first)
    assert path == "normal" and len(before) == 2, [b[4] for b in before]  # the Hopper prefill and its merge
    assert before[0][4][0] == "hopper"
    assert op.call(first)[0] == "memo"
    path, after = op.call(second)
    assert path == "memo" and len(op.compiles) == 2
    hop, hop0 = _args(after[0]), _args(before[0])
    assert after[0][:3] == before[0][:3] and after[0][4:6] == before[0][4:6]
    # K and V as descriptors of the new call's caches, boxed and laid out as the first call's
    for pos, name in ((1, "k_cache"), (2, "v_cache")):
        assert hop[pos].base is second[name] and _desc_fields(hop[pos]) == _desc_fields(hop0[pos])
    # the other leading arguments as the new call's pointers (q, out, cu_seqlens_q, seqused_k, block_table), the
    # split scratch fresh and shared with the merge; the tail as the first call's
    q, out, acc, m, s, cu, used, table = (hop[i] for i in (0, 3, 4, 5, 6, 7, 8, 9))
    assert all(type(x) is int for x in (q, out, acc, m, s, cu, used, table))
    names = ("q", "cu_seqlens_q", "seqused_k", "block_table")
    assert [q, cu, used, table] == [second[n].data_ptr() for n in names] and out == op.out.data_ptr()
    assert list(_args(after[1])[:5]) == [out, acc, m, s, cu]
    # the tile counter: the device's unused one (DYNAMIC off), as the first call's; the tail as the first call's
    assert hop[11] == hop0[11].data_ptr() and hop[12:] == hop0[12:]


def test_a_repeated_dynamic_hopper_layout_takes_a_zeroed_counter_a_call(hopper_op, monkeypatch):
    """DYNAMIC's programs take tiles from the call's counter: each call, normal or repeated, passes a counter of
    its own that is zero at the launch (a shared one would start a second launch at the first one's end)."""
    from tritonkit.ops.paged_attention import replay

    op = hopper_op
    inp = _inputs(CHUNK, seed=4)
    made = []
    real = replay.tile_counter

    def counting(device):
        made.append(real(device))
        return made[-1]

    monkeypatch.setattr(replay, "tile_counter", counting)
    monkeypatch.setattr(api, "tile_counter", counting)
    with tritonkit.ops.overrides(config, PREFILL_HOPPER_PERSISTENT=True, PREFILL_HOPPER_DYNAMIC=True):
        path, normal = op.call(inp)
        assert path == "normal" and _args(normal[0])[11] is made[0]
        path, again = op.call(inp)
        assert path == "memo" and _args(again[0])[11] == made[1].data_ptr()
    assert len(made) == 2 and all(torch.equal(c, torch.zeros(1, dtype=torch.int32)) for c in made)
    assert normal[0][4][0] == "hopper"


def test_the_hopper_replay_matches_a_normal_call_of_the_same_tensors(hopper_op):
    # the replayed launch hands the launcher what Triton's run hands it for the same call (pointers as ints,
    # descriptors as equal descriptors of the same caches); in the fixed tile order, whose counter argument is the
    # device's unused one (a call's own counter: test_a_repeated_dynamic_hopper_layout_takes_a_zeroed_counter_a_call)
    with tritonkit.ops.overrides(config, PREFILL_HOPPER_DYNAMIC=False):
        _replay_matches_a_normal_call(hopper_op)


def _replay_matches_a_normal_call(hopper_op):
    op = hopper_op
    inp = _inputs(CHUNK, seed=2)
    op.call(inp)
    path, replayed = op.call(inp)
    assert path == "memo"
    tritonkit.ops.clear_caches()
    path, normal = op.call(inp)
    assert path == "normal"
    # out and the split scratch (the prefill's arguments 3-6, the merge's 0-3) are allocated afresh by each call
    scratch = ({3, 4, 5, 6}, {0, 1, 2, 3})
    assert len(replayed) == len(normal) == 2
    for r, n, skip in zip(replayed, normal, scratch):
        ra, na = _args(r), _args(n)
        assert len(ra) == len(na) and r[:3] == n[:3] and r[4:6] == n[4:6]
        for i, (x, y) in enumerate(zip(ra, na)):
            if i in skip:
                assert type(x) is int and isinstance(y, torch.Tensor)
            elif hasattr(y, "block_shape"):
                assert x.base is y.base and _desc_fields(x) == _desc_fields(y)
            elif isinstance(y, torch.Tensor):
                assert x == y.data_ptr(), i
            else:
                assert type(x) is type(y) and x == y, i


def test_a_recorded_hopper_layout_keeps_no_cache_alive(hopper_op):
    # the memo outlives the call: it must not hold the caches (a freed KV cache of GBs would stay allocated)
    import gc
    import weakref

    inp = _inputs(CHUNK, seed=3)
    hopper_op.call(inp)
    assert hopper_op.call(inp)[0] == "memo"
    refs = [weakref.ref(inp[n]) for n in ("k_cache", "v_cache")]
    hopper_op.out = None
    hopper_op.launches.clear()  # the stand-in launcher's own record of the arguments
    del inp
    gc.collect()
    assert all(r() is None for r in refs)


_LLAMA = dict(num_heads=32, num_kv_heads=8, head_dim=128, block_size=16)


@pytest.mark.parametrize(
    "shape",
    [
        CHUNK,
        Shape(num_seqs=1, q_len=1024, context=0, num_heads=32, num_kv_heads=8, head_dim=128, block_size=16),
        Shape(num_seqs=3, q_len=(1, 1, 40), context=(4095, 2000, 0), **_LLAMA),
        Shape(num_seqs=4, q_len=(512,) * 4, context=(0,) * 4, **_LLAMA),
    ],
    ids=["chunk", "prompt", "mixed", "prompts"],
)
def test_every_hopper_layout_replays(hopper_op, shape):
    # what tests/ops/test_gpu.py's repeat test asks on the card (it failed there while the Gluon launch bypassed the
    # fast path): the second call of a layout on the Hopper path repeats its recorded launches
    inp = _inputs(shape, seed=4)
    path, launches = hopper_op.call(inp)
    assert path == "normal" and any(ln[4][0] == "hopper" for ln in launches)
    path, again = hopper_op.call(inp)
    assert path == "memo" and [ln[4] for ln in again] == [ln[4] for ln in launches]

"""Paged KV-slot allocation for a prefill batch, modeled on SGLang's paged token-to-KV allocator (`alloc_extend`).
See SOURCES.md: sgl-project/sglang#19898.

One program per request writes the KV slots of its new tokens: first the rest of its last partial page, then whole
new pages taken from the free list, then the start of a last partial page. The `tile_constexpr` kernel covers the
whole-page part with one `tl.arange(0, MAX_EXTEND)` where MAX_EXTEND is the next power of two of the largest
extend size seen so far, a tl.constexpr: every new power of two compiles the kernel again, in the middle of
serving. The twin loops over fixed 4096-slot tiles with a runtime bound, as the fix did.

Both keep `BS_UPPER = next_power_of_2(batch)` as a tl.constexpr (the prefix sums over the batch need a tile): one
compile per power of two of the batch size, a true, minor finding the fix left in place.
"""

import torch
import triton
import triton.language as tl

import tritonkit


@triton.jit
def _alloc_extend_tile_constexpr_kernel(  # expect: recompile
    pre_lens_ptr, seq_lens_ptr, last_loc_ptr, free_pages_ptr, out_ptr,
    BS_UPPER: tl.constexpr, PAGE: tl.constexpr, MAX_EXTEND: tl.constexpr,
):
    pid = tl.program_id(0)
    offs_bs = tl.arange(0, BS_UPPER)
    seq_lens = tl.load(seq_lens_ptr + offs_bs, mask=offs_bs <= pid, other=0)
    pre_lens = tl.load(pre_lens_ptr + offs_bs, mask=offs_bs <= pid, other=0)
    seq_len = tl.load(seq_lens_ptr + pid)
    pre_len = tl.load(pre_lens_ptr + pid)
    # where this request's slots start in `out`, and its first page in the free list: prefix sums over the batch
    out_start = tl.sum(seq_lens - pre_lens) - (seq_len - pre_len)
    own_pages = (seq_len + PAGE - 1) // PAGE - (pre_len + PAGE - 1) // PAGE
    page_start = tl.sum((seq_lens + PAGE - 1) // PAGE - (pre_lens + PAGE - 1) // PAGE) - own_pages
    # 1: the rest of the last partial page
    last_loc = tl.load(last_loc_ptr + pid)
    n1 = tl.minimum(seq_len, (pre_len + PAGE - 1) // PAGE * PAGE) - pre_len
    offs_page = tl.arange(0, PAGE)
    tl.store(out_ptr + out_start + offs_page, last_loc + 1 + offs_page, mask=offs_page < n1)
    if pre_len + n1 == seq_len:
        return
    # 2: whole new pages
    n2 = seq_len // PAGE * PAGE - (pre_len + PAGE - 1) // PAGE * PAGE
    offs = tl.arange(0, MAX_EXTEND)
    page = tl.load(free_pages_ptr + page_start + offs // PAGE, mask=offs < n2)
    tl.store(out_ptr + out_start + n1 + offs, page * PAGE + offs % PAGE, mask=offs < n2)
    if pre_len + n1 + n2 == seq_len:
        return
    # 3: the start of a new partial page
    n3 = seq_len - seq_len // PAGE * PAGE
    last_page = tl.load(free_pages_ptr + page_start + own_pages - 1)
    tl.store(out_ptr + out_start + n1 + n2 + offs_page, last_page * PAGE + offs_page, mask=offs_page < n3)


@triton.jit
def _alloc_extend_kernel(  # expect: recompile
    pre_lens_ptr, seq_lens_ptr, last_loc_ptr, free_pages_ptr, out_ptr,
    BS_UPPER: tl.constexpr, PAGE: tl.constexpr,
):
    pid = tl.program_id(0)
    offs_bs = tl.arange(0, BS_UPPER)
    seq_lens = tl.load(seq_lens_ptr + offs_bs, mask=offs_bs <= pid, other=0)
    pre_lens = tl.load(pre_lens_ptr + offs_bs, mask=offs_bs <= pid, other=0)
    seq_len = tl.load(seq_lens_ptr + pid)
    pre_len = tl.load(pre_lens_ptr + pid)
    out_start = tl.sum(seq_lens - pre_lens) - (seq_len - pre_len)
    own_pages = (seq_len + PAGE - 1) // PAGE - (pre_len + PAGE - 1) // PAGE
    page_start = tl.sum((seq_lens + PAGE - 1) // PAGE - (pre_lens + PAGE - 1) // PAGE) - own_pages
    last_loc = tl.load(last_loc_ptr + pid)
    n1 = tl.minimum(seq_len, (pre_len + PAGE - 1) // PAGE * PAGE) - pre_len
    offs_page = tl.arange(0, PAGE)
    tl.store(out_ptr + out_start + offs_page, last_loc + 1 + offs_page, mask=offs_page < n1)
    if pre_len + n1 == seq_len:
        return
    n2 = seq_len // PAGE * PAGE - (pre_len + PAGE - 1) // PAGE * PAGE
    # a runtime loop over fixed tiles: the extend size never reaches the compiled code
    TILE: tl.constexpr = 4096
    for t in range((n2 + TILE - 1) // TILE):
        offs = t * TILE + tl.arange(0, TILE)
        page = tl.load(free_pages_ptr + page_start + offs // PAGE, mask=offs < n2)
        tl.store(out_ptr + out_start + n1 + offs, page * PAGE + offs % PAGE, mask=offs < n2)
    if pre_len + n1 + n2 == seq_len:
        return
    n3 = seq_len - seq_len // PAGE * PAGE
    last_page = tl.load(free_pages_ptr + page_start + own_pages - 1)
    tl.store(out_ptr + out_start + n1 + n2 + offs_page, last_page * PAGE + offs_page, mask=offs_page < n3)


def _inputs(batch, num_tokens):
    """page 64 (FA3 / FlashMLA), a free list of 1,000,000 pages; all int64 as the allocator keeps them."""
    m = dict(device="meta", dtype=torch.int64)
    return (torch.empty(batch, **m), torch.empty(batch, **m), torch.empty(batch, **m), torch.empty(1_000_000, **m),
            torch.empty(num_tokens, **m))


# batch: requests in one prefill batch; num_tokens: its extend tokens. Lengths < 131,072 (context length); free-list
# entries are page ids; last_loc is the last slot a request holds (-1: none).
BATCH, TOKENS = [1, 8], [64, 1000, 8192, 16384]
BOUNDS = {"pre_lens_ptr": (0, 131_072), "seq_lens_ptr": (0, 131_072), "free_pages_ptr": (0, 999_999),
          "last_loc_ptr": (-1, 63_999_999)}


@tritonkit.case(batch=BATCH, num_tokens=TOKENS, loaded_bounds=BOUNDS)
def alloc_extend_tile_constexpr(batch, num_tokens):
    # the allocator passes the running maximum; each case is the step that first sees this extend size
    _alloc_extend_tile_constexpr_kernel[(batch,)](*_inputs(batch, num_tokens), triton.next_power_of_2(batch), 64,
                                                  triton.next_power_of_2(num_tokens))


@tritonkit.case(batch=BATCH, num_tokens=TOKENS, loaded_bounds=BOUNDS)
def alloc_extend(batch, num_tokens):
    _alloc_extend_kernel[(batch,)](*_inputs(batch, num_tokens), triton.next_power_of_2(batch), 64)

"""Source locations read the same on every Triton. Through 3.7 the TTIR puts an op at the last AST node its maker
visited before making it (``a * b`` at ``b``), in 0-based columns of the dedented kernel; from 3.8 at the start of
the node that made it, in 1-based columns of the file. The checker reads the second as the first, so a finding
names the same expression on the same line whichever Triton compiled the kernel."""

import textwrap

from tritonkit.check import Options, run_check
from tritonkit.check.ir.locations import Locations
from tritonkit.check.ir.source import binop_at, legacy_position

# an indented function (its columns in the file are 4 past the dedented source's)
SOURCE = """\
class Kernels:
    def kern(x_ptr, slot_ptr, stride, n, a, b, c):
        row = tl.program_id(0) % n
        off = row[:, None] * stride + a * b * c
        tl.store(x_ptr + off,
                 tl.load(slot_ptr),
                 mask=off < n)
        v = tl.load(slot_ptr).to(tl.float32)
"""
INDENT = 4


def _at(lines, line, text, nth=0):
    """0-based file column of the nth ``text`` on a 1-based line."""
    col = -1
    for _ in range(nth + 1):
        col = lines[line - 1].index(text, col + 1)
    return col


def test_a_node_start_location_reads_as_the_last_visited_child(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(SOURCE)
    file, lines = str(path), SOURCE.splitlines()

    def legacy(line, start, op, nth=0):
        # Triton 3.8 on: the 1-based file column of the node's start
        return legacy_position(file, line, _at(lines, line, start) + 1, op, lambda: nth)

    def dedented(line, text, nth=0):
        return line, _at(lines, line, text, nth) - INDENT

    # an operator: its right operand, as 3.7 put it, so binop_at quotes the expression
    pos = legacy(4, "row[", "arith.muli")
    assert pos == dedented(4, "stride")
    assert binop_at(file, *pos, "arith.muli").text == "row[:, None] * stride"
    # `a * b * c` makes two multiplications at one column: the outer one (no user of its kind there) and the inner
    outer, inner = legacy(4, "a * b", "arith.muli", 0), legacy(4, "a * b", "arith.muli", 1)
    assert (outer, inner) == (dedented(4, "c"), dedented(4, "b"))
    assert [binop_at(file, *p, "arith.muli").text for p in (outer, inner)] == ["a * b * c", "a * b"]
    # the program id and the remainder start together: each op goes to its own maker
    assert legacy(3, "tl.program_id", "tt.get_program_id") == dedented(3, "0)")
    assert legacy(3, "tl.program_id", "arith.remsi") == dedented(3, "n")
    # a call spread over lines: its last positional argument (keywords are visited before them)
    assert legacy(5, "tl.store", "tt.store") == dedented(6, "tl.load")
    # two calls at one column: the one named for the op
    assert legacy(8, "tl.load", "tt.load") == dedented(8, "slot_ptr")
    # the call site of an inlined function: the call's last argument
    assert legacy(6, "tl.load", None) == dedented(6, "slot_ptr")
    assert legacy_position(file, 1, 1, "arith.muli") is None  # no function holds the line


def test_the_convention_is_read_from_the_functions_own_location():
    # through 3.7 a kernel's `def` is at column 0 whatever its indent; from 3.8 at its indent plus one
    assert not Locations({"#loc": '"/k.py":2:0'}).node_starts("#loc")
    assert Locations({"#loc": '"/k.py":2:5'}).node_starts("#loc")
    assert not Locations({}).node_starts(None)


CASE = """\
import torch
import triton
import triton.language as tl

import tritonkit

if True:  # an indented kernel: from Triton 3.8 its columns count from the file's margin

    @triton.jit
    def _slot_split_kernel(cache_ptr, slot_ptr, stride, BLOCK: tl.constexpr):
        slot = tl.load(slot_ptr + tl.program_id(0))
        offs = tl.arange(0, BLOCK)
        tl.store(cache_ptr + (slot
                              * stride) + offs, tl.zeros([BLOCK], tl.float32))


@tritonkit.case(n=[4])
def split(n):
    cache = torch.empty(2**33, device="meta")
    _slot_split_kernel[(n,)](cache, torch.empty(n, dtype=torch.int32, device="meta"), 512, BLOCK=16)
"""


def test_a_finding_names_the_expression_on_its_3_6_line(tmp_path):
    path = tmp_path / "split.py"
    path.write_text(textwrap.dedent(CASE))
    rep = run_check([str(path)], Options(disk_cache=False))
    (f,) = rep.findings
    # the line Triton 3.6 reports (the right operand's), on every release; the expression as written
    assert f.rule == "int32-offset" and f.line == 14
    assert f.message.startswith("`slot * stride` is computed in int32")
    assert "`slot` is loaded from memory" in f.message and "`stride` = 512" in f.message

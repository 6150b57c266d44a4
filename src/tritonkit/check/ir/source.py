"""From a TTIR location back to the Python expression it was generated from.

Through Triton 3.7, each op carries the line and column of the last AST node its maker visited before creating it:
for a binary operation that is the start of its right operand, for a call its last argument's, in the coordinates
of the function's dedented source (the line is the file's). :func:`binop_at` finds the ``a * b`` (or ``a += b``)
whose right operand starts there, so a finding can quote ``tl.program_id(0) * BLOCK`` instead of an SSA name.

Triton 3.8 locates an op at the start of the node that made it instead (``a * b``'s own start), with 1-based
columns in the file's coordinates. :func:`legacy_position` maps such a location back to the one 3.7 would give, so
names, lines and columns come out the same on every release.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache
from collections.abc import Callable

_OPS = {
    "arith.muli": ast.Mult,
    "arith.addi": ast.Add,
    "arith.subi": ast.Sub,
    "arith.shli": ast.LShift,
    "arith.divsi": ast.FloorDiv,
    "arith.remsi": ast.Mod,
}


@dataclasses.dataclass(frozen=True)
class Expr:
    """A binary expression in the source: its text and its two operands' texts and spans."""

    text: str
    left: str
    right: str
    left_span: tuple[int, int, int, int]  # (line, col, end line, end col) in file coordinates
    right_span: tuple[int, int, int, int]


@functools.lru_cache(maxsize=64)
def _tree(file: str) -> tuple[ast.Module, str] | None:
    text = "".join(linecache.getlines(file))
    if not text:
        return None
    try:
        return ast.parse(text), text
    except (SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=4096)
def _function_at(tree: ast.Module, line: int):
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


def _span(node) -> tuple[int, int, int, int]:
    return node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or node.col_offset


# a rule asks once per launch and site: an autotuned file's hundreds of compiles ask the same
@functools.lru_cache(maxsize=4096)
def binop_at(file: str | None, line: int, col: int, op_name: str) -> Expr | None:
    """The binary expression an integer op (``arith.muli`` ...) at ``file:line:col`` was generated from."""
    kind = _OPS.get(op_name)
    got = _tree(file) if file and kind is not None else None
    if got is None:
        return None
    tree, text = got
    fn = _function_at(tree, line)
    if fn is None:
        return None
    # the kernel's source was dedented to its `def` before Triton parsed it
    fcol = col + fn.col_offset
    for node in ast.walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, kind):
            left, right = node.left, node.right
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, kind):
            left, right = node.target, node.value
        else:
            continue
        if right.lineno == line and right.col_offset == fcol:
            a, b = (" ".join((ast.get_source_segment(text, x) or "").split()) for x in (left, right))
            if not a or not b:
                return None
            seg = (
                " ".join((ast.get_source_segment(text, node) or "").split())
                if isinstance(node, ast.BinOp)
                else f"{a} {_SYM[kind]} {b}"
            )  # `x += y` computes x + y
            return Expr(seg, a, b, _span(left), _span(right))
    return None


@functools.lru_cache(maxsize=4096)
def call_at(file: str | None, line: int, col: int) -> str | None:
    """The source of the call an op inlined from a jit function (``tl.cdiv(n, SPLITS)``) was generated from: its
    location is its last argument's start."""
    got = _tree(file) if file else None
    fn = _function_at(got[0], line) if got else None
    if fn is None:
        return None
    fcol = col + fn.col_offset
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            last = (list(node.args) + [k.value for k in node.keywords])[-1:] or [node]
            if last[0].lineno == line and last[0].col_offset == fcol:
                return " ".join((ast.get_source_segment(got[1], node) or "").split()) or None
    return None


@functools.lru_cache(maxsize=4096)
def dedent_col(file: str | None, line: int, col: int) -> tuple[int, int]:
    """A TTIR location's (line, column) in file coordinates."""
    got = _tree(file) if file else None
    fn = _function_at(got[0], line) if got else None
    return line, col + (fn.col_offset if fn is not None else 0)


def within(pos: tuple[int, int], span: tuple[int, int, int, int]) -> bool:
    (ln, c), (l0, c0, l1, c1) = pos, span
    return (l0, c0) <= (ln, c) <= (l1, c1)


_SYM = {ast.Mult: "*", ast.Add: "+", ast.Sub: "-", ast.LShift: "<<", ast.FloorDiv: "//", ast.Mod: "%"}


#: the AST operator of each arith op a binary operation makes (integer and float), to tell apart two nodes that start
#: at one column (``tl.program_id(0) % n`` makes ``tt.get_program_id`` and ``arith.remsi`` there)
_BIN_KIND = {
    **_OPS,
    "arith.addf": ast.Add,
    "arith.subf": ast.Sub,
    "arith.mulf": ast.Mult,
    "arith.divf": ast.Div,
    "arith.divui": ast.FloorDiv,
    "arith.floordivsi": ast.FloorDiv,
    "arith.remui": ast.Mod,
    "arith.remf": ast.Mod,
    "arith.shrsi": ast.RShift,
    "arith.shrui": ast.RShift,
    "arith.andi": ast.BitAnd,
    "arith.ori": ast.BitOr,
    "arith.xori": ast.BitXor,
}
#: nodes whose visit makes ops
_MAKERS = (ast.BinOp, ast.AugAssign, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Subscript, ast.Call)


def _last_visited(node: ast.AST) -> ast.AST:
    """The child Triton 3.7 visits last before it makes ``node``'s op: the op's location there."""
    if isinstance(node, ast.BinOp):
        return node.right
    if isinstance(node, ast.AugAssign):
        return node.value
    if isinstance(node, ast.Compare):
        return node.comparators[-1]
    if isinstance(node, ast.BoolOp):
        return node.values[-1]
    if isinstance(node, ast.UnaryOp):
        return node.operand
    if isinstance(node, ast.Subscript):
        return node.slice
    if isinstance(node, ast.Call):
        # keywords are visited before the positional arguments
        if node.args:
            last = node.args[-1]
            return last.value if isinstance(last, ast.Starred) else last
        return node.keywords[-1] if node.keywords else node.func
    return node


def _kind_filter(op_name: str | None):
    if op_name is None:  # a call site (of a function Triton inlined)
        return lambda n: isinstance(n, ast.Call)
    kind = _BIN_KIND.get(op_name)
    if kind is not None:
        return lambda n: isinstance(n, (ast.BinOp, ast.AugAssign)) and isinstance(n.op, kind)
    if op_name in ("arith.cmpi", "arith.cmpf"):
        return lambda n: isinstance(n, ast.Compare)
    if not op_name.startswith(("arith.", "tt.splat", "tt.broadcast")):
        # an operator makes arithmetic (and the splats that shape its operands); anything else comes of a call or
        # an index (``tl.program_id(0) % n`` makes ``tt.get_program_id`` and ``arith.remsi`` at one column)
        return lambda n: isinstance(n, (ast.Call, ast.Subscript))
    return None


def legacy_position(
    file: str | None, line: int, col: int, op_name: str | None, nth: Callable[[], int] = lambda: 0
) -> tuple[int, int] | None:
    """Where Triton 3.7 locates an op that Triton 3.8 or later locates at ``file:line:col`` (1-based, the file's
    columns): (line, column in the dedented source), or None when no function holds the line. ``op_name`` is the op
    (None: the location is the call site of an inlined function); ``nth()`` is how many ops of the same name and
    location consume this one (``a * b * c`` makes two ``arith.muli`` at one column: the outer uses the inner).
    Where the op's maker cannot be told, its own start is kept."""
    got = _starting_at(file, line, col - 1) if file else None
    if got is None:
        return None
    here, indent = got
    keep = _kind_filter(op_name)
    chosen = [n for n in here if keep(n)] if keep is not None else []
    chosen = chosen or here
    spots = _spots(chosen)
    if len(spots) > 1 and op_name is not None:
        # calls at one column (``tl.load(p).to(tl.float32)``): the one named for the op
        names = _CALLEE.get(op_name, {op_name.rsplit(".", 1)[-1]})
        named = [n for n in chosen if isinstance(n, ast.Call) and _callee(n) in names]
        spots = _spots(named) if named else spots
    if len(spots) > 1 and op_name in _BIN_KIND:
        spots = [spots[min(nth(), len(spots) - 1)]]
    ln, c = spots[0] if len(spots) == 1 else (line, col - 1)
    return ln, c - indent


#: the callee of a ``tl`` call that makes each op, where its name is not the op's own (``tt.load``: ``load``)
_CALLEE = {
    "tt.get_program_id": {"program_id"},
    "tt.get_num_programs": {"num_programs"},
    "tt.make_range": {"arange"},
    "tt.atomic_rmw": {f"atomic_{k}" for k in ("add", "max", "min", "and", "or", "xor", "xchg")},
    "tt.atomic_cas": {"atomic_cas"},
    "tt.reduce": {"sum", "max", "min", "reduce", "argmax", "argmin", "xor_sum"},
}


def _callee(call: ast.Call) -> str | None:
    fn = call.func
    return fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None


def _spots(nodes) -> list[tuple[int, int]]:
    return list(dict.fromkeys((c.lineno, c.col_offset) for c in map(_last_visited, nodes)))


@functools.lru_cache(maxsize=4096)
def _starting_at(file: str, line: int, col: int) -> tuple[tuple[ast.AST, ...], int] | None:
    """(the op-making nodes that start at ``file:line:col``, 0-based, enclosing ones first; the indent of the
    function holding them), or None when no function holds the line."""
    got = _tree(file)
    fn = _function_at(got[0], line) if got else None
    if fn is None:
        return None
    # breadth first: of the nodes starting here, an enclosing one comes before the nodes it encloses
    here = tuple(n for n in ast.walk(fn) if isinstance(n, _MAKERS) and n.lineno == line and n.col_offset == col)
    return here, fn.col_offset

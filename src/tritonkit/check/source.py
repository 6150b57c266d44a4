"""From a TTIR location back to the Python expression it was generated from.

Triton records, for each op, the line and column of the last AST node it visited before creating the op: for a
binary operation that is the start of its right operand, in the coordinates of the function's dedented source
(the line is the file's). :func:`binop_at` finds the ``a * b`` (or ``a += b``) whose right operand starts there, so
a finding can quote ``tl.program_id(0) * BLOCK`` instead of an SSA name.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache

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


def _function_at(tree: ast.Module, line: int):
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


def _span(node) -> tuple[int, int, int, int]:
    return node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or node.col_offset


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


def dedent_col(file: str | None, line: int, col: int) -> tuple[int, int]:
    """A TTIR location's (line, column) in file coordinates."""
    got = _tree(file) if file else None
    fn = _function_at(got[0], line) if got else None
    return line, col + (fn.col_offset if fn is not None else 0)


def within(pos: tuple[int, int], span: tuple[int, int, int, int]) -> bool:
    (ln, c), (l0, c0, l1, c1) = pos, span
    return (l0, c0) <= (ln, c) <= (l1, c1)


_SYM = {ast.Mult: "*", ast.Add: "+", ast.Sub: "-", ast.LShift: "<<", ast.FloorDiv: "//", ast.Mod: "%"}

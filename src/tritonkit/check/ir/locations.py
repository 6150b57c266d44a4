"""Source locations of TTIR ops: ``loc(...)`` aliases, names and call sites, resolved to frames in user code."""

from __future__ import annotations

import dataclasses
import re

from .mlir import _match_close, split_top


@dataclasses.dataclass(frozen=True)
class Frame:
    file: str | None
    line: int
    col: int
    name: str | None = None


class Locations:
    """Resolves ``loc(...)`` expressions (aliases, names, call sites) to source frames, innermost first."""

    def __init__(self, aliases: dict[str, str]):
        self.aliases = aliases
        self.memo: dict[str, tuple[Frame, ...]] = {}

    def frames(self, expr: str | None, depth: int = 0) -> tuple[Frame, ...]:
        if not expr or depth > 64:
            return ()
        expr = expr.strip()
        if expr in self.memo:
            return self.memo[expr]
        out: tuple[Frame, ...] = ()
        if expr.startswith("#loc"):
            out = self.frames(self.aliases.get(expr), depth + 1)
        elif expr.startswith("callsite("):
            inner = expr[len("callsite(") : -1]
            parts = split_top(inner, " at ")
            if len(parts) == 2:
                out = self.frames(parts[0], depth + 1) + self.frames(parts[1], depth + 1)
        elif expr.startswith("fused"):
            b = expr.find("[")
            if b >= 0:
                for piece in split_top(expr[b + 1 : expr.rfind("]")], ","):
                    out = self.frames(piece, depth + 1)
                    if out:
                        break
        elif expr.startswith('"'):
            end = 1
            while end < len(expr) and expr[end] != '"':
                end += 2 if expr[end] == "\\" else 1
            s, rest = expr[1:end], expr[end + 1 :]
            m = re.match(r":(\d+):(\d+)", rest)
            if m:
                out = (Frame(s, int(m.group(1)), int(m.group(2))),)
            elif rest.startswith("("):
                child = self.frames(rest[1 : _match_close(rest, 0)], depth + 1)
                if child:
                    out = (dataclasses.replace(child[0], name=child[0].name or s),) + child[1:]
                else:
                    out = (Frame(None, 0, 0, s),)
        self.memo[expr] = out
        return out

    def user_frame(self, expr: str | None, skip_prefixes: tuple[str, ...]) -> Frame | None:
        """The innermost frame in user code (not inside Triton's own language modules)."""
        return self.user_site(expr, skip_prefixes)[0]

    def user_site(self, expr: str | None, skip_prefixes: tuple[str, ...]) -> tuple[Frame | None, bool]:
        """(the innermost frame in user code, whether it is a call site: the op was made inside a function Triton
        inlined there, ``tl.cdiv`` or a jit function of Triton's own)."""
        fr = [f for f in self.frames(expr) if f.file]
        for k, f in enumerate(fr):
            if not f.file.startswith(skip_prefixes):
                return f, k > 0
        return (fr[0], False) if fr else (None, False)

    def node_starts(self, func_loc: str | None) -> bool:
        """Whether the IR locates each op at the start of the AST node that made it, with 1-based columns in the
        file's coordinates (Triton 3.8 on), rather than at the last node visited before it was made, with 0-based
        columns in the dedented source (through 3.7). Read from the function's own location: through 3.7 its
        ``def`` is at column 0 whatever its indent, from 3.8 at the indent plus one."""
        fr = [f for f in self.frames(func_loc) if f.file]
        return bool(fr) and fr[0].col >= 1

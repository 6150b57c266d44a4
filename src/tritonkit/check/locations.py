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
        fr = [f for f in self.frames(expr) if f.file]
        for f in fr:
            if not f.file.startswith(skip_prefixes):
                return f
        return fr[0] if fr else None

"""A tolerant reader for the MLIR text Triton prints for TTIR.

It recovers what the rules need and nothing more: ops with their results, operands, result types, raw text and
source locations, nested regions and block arguments. It reads the custom (pretty) forms of the ops the rules
know and the generic form of everything else, so an op it has never seen still parses; what an op *means* is
the analyses' business. Text rather than the Python IR bindings because the bindings do not expose attributes or
value identity across Triton releases, while the printed form has stayed stable.
"""

from __future__ import annotations

import dataclasses
import functools
import re

_NAME = r"%[A-Za-z0-9_$.\-]+(?:#\d+)?"
_NAME_RE = re.compile(_NAME)
_OPEN = "([{<"
_CLOSE = ")]}>"


class ParseError(Exception):
    pass


def _norm(name: str) -> str:
    return name[1:] if name.startswith("%") else name


def _match_close(s: str, i: int) -> int:
    """Index of the bracket closing the one at ``s[i]``, skipping strings; -1 if unbalanced."""
    depth, j, n = 0, i, len(s)
    while j < n:
        c = s[j]
        if c == '"':
            j += 1
            while j < n and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
        elif c == "-" and j + 1 < n and s[j + 1] == ">":
            j += 1
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


_SPLIT_RE: dict[str, re.Pattern] = {}


def split_top(s: str, sep: str) -> list[str]:
    """Split on ``sep`` outside brackets and strings (``->`` is not a bracket)."""
    if sep not in s:
        return [s]
    pat = _SPLIT_RE.get(sep)
    if pat is None:
        pat = _SPLIT_RE[sep] = re.compile(r'"(?:[^"\\]|\\.)*"|->|[(\[{<)\]}>]|' + re.escape(sep))
    out, depth, start = [], 0, 0
    for m in pat.finditer(s):
        t = m.group()
        if t[0] == '"':
            continue
        if t == "->":
            if sep == "->" and depth == 0:
                out.append(s[start : m.start()])
                start = m.end()
            continue
        if len(t) == 1 and t in "([{<":
            depth += 1
        elif len(t) == 1 and t in ")]}>":
            depth -= 1
        elif depth == 0:
            out.append(s[start : m.start()])
            start = m.end()
    out.append(s[start:])
    return out


_GROUP_RE: dict[tuple[str, ...], re.Pattern] = {}


def _remove_groups(s: str, openers: tuple[str, ...]) -> str:
    """Drop every ``loc(...)``-like group (the opener text plus its balanced body) and string literal."""
    pat = _GROUP_RE.get(openers)
    if pat is None:
        pat = _GROUP_RE[openers] = re.compile(r'"(?:[^"\\]|\\.)*"|' + "|".join(re.escape(o) for o in openers))
    m = pat.search(s)
    if m is None:
        return s
    out, j = [], 0
    while m is not None:
        out.append(s[j : m.start()])
        t = m.group()
        if t[0] == '"':
            out.append('""')
            j = m.end()
        else:
            end = _match_close(s, m.start() + next(i for i, c in enumerate(t) if c in _OPEN))
            if end < 0:
                return "".join(out)
            j = end + 1
        m = pat.search(s, j)
    out.append(s[j:])
    return "".join(out)


def _strip_decor(s: str) -> str:
    return _remove_groups(s, ("loc(", "<{", "{"))


@functools.lru_cache(maxsize=4096)
def elem_type(t: str) -> str:
    t = t.strip()
    if t.startswith("tensor<") and t.endswith(">"):
        inner = split_top(t[7:-1], ",")[0].strip()
        m = re.match(r"((?:(?:\d+|\?)x)*)(.*)", inner)
        return m.group(2).strip()
    return t


@functools.lru_cache(maxsize=4096)
def shape_of(t: str) -> tuple[int, ...]:
    t = t.strip()
    if t.startswith("tensor<") and t.endswith(">"):
        inner = split_top(t[7:-1], ",")[0].strip()
        m = re.match(r"((?:(?:\d+|\?)x)*)", inner)
        return tuple(int(d) if d.isdigit() else -1 for d in m.group(1).split("x")[:-1])
    return ()


_INT_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64}


def int_bits(t: str | None) -> int | None:
    return _INT_BITS.get(elem_type(t)) if t else None


def _retyped(t: str, inner: str) -> str:
    """``t``'s shape (and layout, in TTGIR) around element type ``inner``; ``inner`` alone for a scalar."""
    shape = shape_of(t)
    if not shape:
        return inner
    parts = split_top(t.strip()[len("tensor<") : -1], ",")
    layout = f", {parts[1].strip()}" if len(parts) == 2 else ""
    return f"tensor<{'x'.join(map(str, shape))}x{inner}{layout}>"


def pointee(t: str) -> str:
    e = elem_type(t)
    m = re.match(r"!tt\.ptr<(.*?)(?:,\s*\d+)?>$", e)
    return _retyped(t, m.group(1) if m else e)


@dataclasses.dataclass(eq=False)
class Block:
    args: list[tuple[str, str]]
    ops: list[Op]
    parent: Op | None
    region: int = 0
    label: str | None = None  # ``^bb1``; None for a region's or the function's entry block

    def successors(self) -> list[str]:
        """Labels this block branches to (``cf.br``/``cf.cond_br``); none when it returns."""
        last = self.ops[-1] if self.ops else None
        if last is None or not last.name.startswith("cf."):
            return []
        return re.findall(r"\^[\w$.\-]+", last.text)


@dataclasses.dataclass(eq=False)
class Op:
    name: str
    results: list[str]
    operands: list[str]
    types: list[str]
    text: str
    loc: str | None
    block: Block | None
    pos: int
    end: int = -1
    regions: list[list[Block]] = dataclasses.field(default_factory=list)
    extra: dict = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Op({self.name} #{self.pos})"

    def attr_int(self, key: str) -> int | None:
        m = re.search(rf"\b{re.escape(key)}\s*=\s*(-?\d+)", self.text)
        return int(m.group(1)) if m else None

    def ancestors(self):
        """Enclosing ops, innermost first."""
        b = self.block
        while b is not None and b.parent is not None:
            yield b.parent
            b = b.parent.block


@dataclasses.dataclass(eq=False)
class Func:
    name: str
    args: list[tuple[str, str, str | None]]
    body: Block
    ops: list[Op]
    defs: dict[str, Op]
    types: dict[str, str]
    block_args: dict[str, tuple[Block, int]]
    #: the function's blocks in order: more than one when an early ``return`` left ``cf`` branches
    blocks: list[Block] = dataclasses.field(default_factory=list)
    #: per-value facts analyses derive from the IR alone (they never change once parsed), by analysis
    memo: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    #: the function's own location (its ``def``), from the ``} loc(...)`` that closes it
    loc: str | None = None

    def top_block(self, op: Op) -> Block | None:
        """The function-level block that holds ``op`` (directly or inside a region)."""
        b = op.block
        while b is not None and b.parent is not None:
            b = b.parent.block
        return b

    def reaches(self, a: Block, b: Block, avoid: Block | None = None) -> bool:
        """Control can pass from function-level block ``a`` to ``b`` (``a`` itself included), without entering
        ``avoid`` when given."""
        by_label = {blk.label: blk for blk in self.blocks if blk.label}
        seen, stack = set(), [a]
        while stack:
            blk = stack.pop()
            if blk is b:
                return True
            if id(blk) in seen or blk is avoid:
                continue
            seen.add(id(blk))
            stack += [by_label[x] for x in blk.successors() if x in by_label]
        return False


@dataclasses.dataclass(eq=False)
class Module:
    funcs: dict[str, Func]
    aliases: dict[str, str]
    entry: str | None

    def entry_func(self) -> Func:
        if self.entry and self.entry in self.funcs:
            return self.funcs[self.entry]
        if not self.funcs:
            raise ParseError("no tt.func in the module")
        return next(iter(self.funcs.values()))


def _strip_comment(s: str) -> str:
    """Drop a trailing ``// ...`` comment (outside string literals)."""
    if "//" not in s:
        return s
    in_str, j, n = False, 0, len(s)
    while j < n:
        c = s[j]
        if c == '"':
            in_str = not in_str
        elif c == "\\" and in_str:
            j += 1
        elif not in_str and s.startswith("//", j):
            return s[:j]
        j += 1
    return s


def _trailing_loc(s: str) -> tuple[str, str | None]:
    """Split ``... loc(X)`` into (text, X); the text may be empty (a region's closing ``} loc(X)``)."""
    s = s.rstrip()
    if not s.endswith(")"):
        return s, None
    padded = " " + s  # a bare "loc(X)" has no space before it
    i = padded.rfind(" loc(")
    while i >= 0:
        if _match_close(padded, i + 4) == len(padded) - 1:
            return padded[:i].strip(), padded[i + 5 : -1]
        i = padded.rfind(" loc(", 0, i)
    return s, None


def _result_types(name: str, types_text: str, nres: int) -> list[str]:
    if not nres:
        return []
    t = types_text.strip()
    arrow = split_top(t, "->")
    if len(arrow) > 1:
        res = arrow[-1].strip()
        if res.startswith("(") and res.endswith(")"):
            res = res[1:-1]
        out = [x.strip() for x in split_top(res, ",") if x.strip()]
    else:
        to = split_top(t, " to ")
        if len(to) > 1:
            out = [to[-1].strip()]
        else:
            parts = [x.strip() for x in split_top(t, ",") if x.strip()]
            if not parts:
                return ["?"] * nres
            if name == "tt.load":
                out = [pointee(parts[0])]
            elif name in ("arith.cmpi", "arith.cmpf"):
                out = [_retyped(parts[0], "i1")]
            elif name == "arith.select":
                out = [parts[-1]]
            else:
                out = [parts[0]]
    if len(out) < nres:
        out = out + [out[-1] if out else "?"] * (nres - len(out))
    return out[:nres]


def _parse_results(lhs: str) -> list[str]:
    out = []
    for piece in lhs.split(","):
        piece = piece.strip()
        m = re.fullmatch(r"(%[A-Za-z0-9_$.\-]+)(?::(\d+))?", piece)
        if not m:
            raise ParseError(f"cannot read results {lhs!r}")
        if m.group(2):
            out += [f"{_norm(m.group(1))}#{i}" for i in range(int(m.group(2)))]
        else:
            out.append(_norm(m.group(1)))
    return out


def _typed_args(inner: str) -> list[tuple[str, str, str | None]]:
    """``%a: type {attrs} loc(..), ...`` -> [(name, type, loc)]."""
    out = []
    for piece in split_top(inner, ","):
        piece = piece.strip()
        if not piece:
            continue
        body, loc = _trailing_loc(piece)
        body = _remove_groups(body, ("{",)).strip()
        m = re.match(r"(%[A-Za-z0-9_$.\-]+)\s*:\s*(.*)", body)
        if m:
            out.append((_norm(m.group(1)), m.group(2).strip(), loc))
    return out


class _Parser:
    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.aliases: dict[str, str] = {}
        self.funcs: dict[str, Func] = {}
        self.entry: str | None = None
        self.pos = 0
        # printed names are unique only per region scope: give every value a module-unique id
        self.scopes: list[dict[str, str]] = [{}]
        self.used: set[str] = set()

    def _def(self, name: str) -> str:
        uid, k = name, 1
        while uid in self.used:
            uid, k = f"{name}@{k}", k + 1
        self.used.add(uid)
        self.scopes[-1][name] = uid
        return uid

    def _ref(self, name: str) -> str:
        for sc in reversed(self.scopes):
            if name in sc:
                return sc[name]
        return name

    def parse(self) -> Module:
        for ln in self.lines:
            s = ln.strip()
            if s.startswith("#loc"):
                m = re.match(r"(#loc\d*)\s*=\s*loc\((.*)\)\s*$", s)
                if m:
                    self.aliases[m.group(1)] = m.group(2)
        i, n = 0, len(self.lines)
        while i < n:
            s = self.lines[i].strip()
            if s.startswith("tt.func"):
                i = self._func(i)
            else:
                i += 1
        return Module(self.funcs, self.aliases, self.entry)

    def _func(self, i: int) -> int:
        s = self.lines[i].strip()
        # a symbol is quoted where its name holds other characters (Gluon's specializations: `(4,)cconstexpr_16`)
        m = re.match(r"tt\.func\s+(?:(public|private|nested)\s+)?@(?:\"([^\"]+)\"|([\w$.\-]+))\s*\(", s)
        if not m:
            raise ParseError(f"cannot read function header: {s[:120]}")
        name = m.group(2) or m.group(3)
        open_i = m.end() - 1
        close_i = _match_close(s, open_i)
        self.scopes = [{}]
        args = [(self._def(a), t, loc) for a, t, loc in _typed_args(s[open_i + 1 : close_i])]
        body = Block([(a, t) for a, t, _ in args], [], None)
        f = Func(name, args, body, [], {}, {a: t for a, t, _ in args}, {}, [body])
        for k, (a, _t, _l) in enumerate(args):
            f.block_args[a] = (body, k)
        if m.group(1) in (None, "public") and self.entry is None:
            self.entry = f.name
        self.funcs[f.name] = f
        if not s.endswith("{"):
            return i + 1  # declaration
        stack: list[tuple[Op | None, Block]] = [(None, body)]
        i += 1
        while i < len(self.lines) and stack:
            s = _strip_comment(self.lines[i]).strip()
            i += 1
            if not s:
                continue
            if s.startswith("}"):
                self._close(f, s, stack)
            elif s.startswith("^"):
                self._block_header(f, s, stack)
            else:
                self._op(f, s, stack)
        return i

    def _block_header(self, f: Func, s: str, stack) -> None:
        owner, blk = stack[-1]
        m = re.match(r"(\^[\w$.\-]+)\s*(\(.*\))?\s*:", s)
        args = []
        if m and m.group(2):
            args = [(self._def(a), t) for a, t, _ in _typed_args(m.group(2)[1:-1])]
        if blk.ops or blk.args:
            # a second block in the same region (or in the function: `cf` branches of an early return)
            nb = Block([], [], owner, blk.region)
            if owner is None:
                f.blocks.append(nb)
            else:
                owner.regions[-1].append(nb)
            stack[-1] = (owner, nb)
            blk = nb
        blk.args = args
        blk.label = m.group(1) if m else None
        for k, (a, t) in enumerate(args):
            f.types[a] = t
            f.block_args[a] = (blk, k)

    def _close(self, f: Func, s: str, stack) -> None:
        owner, _blk = stack.pop()
        if owner is None:
            f.loc = _trailing_loc(s[1:].strip())[1]
            return  # end of function
        self.scopes.pop()
        rest = s[1:].strip().lstrip(")").strip()
        reopen = rest.startswith(", {") or rest.startswith(",{") or re.match(r"^(else|do)\s*\{$", rest) is not None
        if reopen or rest == "{":
            blk = Block([], [], owner, len(owner.regions))
            owner.regions.append([blk])
            stack.append((owner, blk))
            self.scopes.append({})
            return
        owner.end = self.pos - 1
        body, loc = _trailing_loc(rest)
        if loc is not None:
            owner.loc = loc
        body = _strip_decor(" " + body)
        parts = split_top(body, " : ")
        if len(parts) > 1 and owner.results and owner.types and owner.types[0] == "?":
            owner.types = _result_types(owner.name, parts[-1], len(owner.results))
            for r, t in zip(owner.results, owner.types):
                f.types[r] = t

    def _op(self, f: Func, s: str, stack) -> None:
        owner, blk = stack[-1]
        if self._gluon_partition(f, s, stack):
            return
        opens = s.endswith("{")
        line = s[:-1].rstrip() if opens else s
        generic_region = opens and line.endswith("(")
        if generic_region:
            line = line[:-1].rstrip()
        line, loc = _trailing_loc(line)
        results: list[str] = []
        m = re.match(r"^((?:%[A-Za-z0-9_$.\-]+(?::\d+)?\s*,\s*)*%[A-Za-z0-9_$.\-]+(?::\d+)?)\s*=\s*(.*)$", line)
        if m:
            results = _parse_results(m.group(1))
            rhs = m.group(2)
            printed = results
        else:
            rhs = line
            printed = []
        mm = re.match(r'^"([^"]+)"|^([A-Za-z_][\w$.\-]*)', rhs)
        if not mm:
            raise ParseError(f"cannot read op: {s[:120]}")
        name = mm.group(1) or mm.group(2)
        after = rhs[mm.end() :]
        op = Op(name, results, [], ["?"] * len(results), rhs, loc, blk, self.pos)
        self.pos += 1
        f.ops.append(op)
        blk.ops.append(op)
        if name == "scf.for":
            self._for_header(f, op, after)
        elif name == "scf.while":
            self._while_header(f, op, after)
        else:
            clean = _strip_decor(after)
            parts = split_top(clean, " : ")
            op.operands = [self._ref(_norm(x)) for x in _NAME_RE.findall(parts[0])]
            if len(parts) > 1 and results:
                op.types = _result_types(name, parts[-1], len(results))
            elif name == "arith.constant" and results and parts[0].strip() in ("true", "false"):
                op.types = ["i1"]
            elif name == "scf.if" and results:
                arrow = split_top(clean, "->")
                if len(arrow) > 1:
                    op.types = _result_types(name, "->" + arrow[-1], len(results))
                    op.operands = [self._ref(_norm(x)) for x in _NAME_RE.findall(arrow[0])]
        op.results = results = [self._def(r) for r in printed]
        for r, t in zip(results, op.types):
            f.defs[r] = op
            f.types[r] = t
        if opens:
            first = Block([], [], op, 0)
            self.scopes.append({})
            if name == "scf.for":
                types = op.types if op.types else ["?"] * len(op.extra["iter"])
                first.args = [(op.extra["iv"], op.extra["iv_type"])] + list(zip(op.extra["iter"], types))
            elif name == "scf.while":
                first.args = list(zip(op.extra["iter"], op.extra["iter_types"]))
            first.args = [(self._def(a), t) for a, t in first.args]
            for k, (a, t) in enumerate(first.args):
                f.types[a] = t
                f.block_args[a] = (first, k)
            op.regions.append([first])
            stack.append((op, first))
        else:
            op.end = op.pos

    def _gluon_partition(self, f: Func, s: str, stack) -> bool:
        """Gluon's ``ttg.warp_specialize(...)`` is followed by its regions in a custom form: ``default {`` (the
        calling warps) and ``partitionN(%arg: type, ...) num_warps(k) {`` (each taking the op's operands). They are
        read as regions of that op, the partitions' arguments as their first blocks' arguments."""
        m = re.match(r"^(default|partition\d+)\s*(\(.*\))?[^{]*\{$", s)
        _owner, blk = stack[-1]
        ws = blk.ops[-1] if blk.ops else None
        if not m or ws is None or ws.name != "ttg.warp_specialize":
            return False
        args = []
        if m.group(2):
            args = [(self._def(a), t) for a, t, _ in _typed_args(m.group(2)[1:-1])]
        first = Block(args, [], ws, len(ws.regions))
        for k, (a, t) in enumerate(args):
            f.types[a] = t
            f.block_args[a] = (first, k)
        ws.regions.append([first])
        self.scopes.append({})
        stack.append((ws, first))
        return True

    def _for_header(self, f: Func, op: Op, after: str) -> None:
        clean = _strip_decor(after)
        m = re.match(r"\s*(?:unsigned\s+)?(%\S+)\s*=\s*(%\S+)\s+to\s+(%\S+)\s+step\s+(%\S+)", clean)
        if not m:
            raise ParseError(f"cannot read scf.for header: {clean[:120]}")
        iv = _norm(m.group(1))
        lb, ub, st = (self._ref(_norm(g)) for g in m.groups()[1:])
        iters, inits = [], []
        im = re.search(r"iter_args\(", clean)
        if im:
            close = _match_close(clean, im.end() - 1)
            for piece in split_top(clean[im.end() : close], ","):
                a, _, b = piece.partition("=")
                iters.append(_norm(a.strip()))
                inits.append(self._ref(_norm(b.strip())))
        parts = split_top(clean, " : ")
        iv_type = parts[-1].strip() if len(parts) > 1 else "i32"
        arrow = split_top(parts[0], "->")
        if len(arrow) > 1 and op.results:
            op.types = _result_types("scf.for", "->" + arrow[-1], len(op.results))
        elif iters and not op.results:
            op.types = []
        op.operands = [lb, ub, st] + inits
        op.extra.update(iv=iv, iv_type=iv_type, iter=iters)

    def _while_header(self, f: Func, op: Op, after: str) -> None:
        clean = _strip_decor(after)
        iters, inits = [], []
        o = clean.find("(")
        if o >= 0:
            close = _match_close(clean, o)
            for piece in split_top(clean[o + 1 : close], ","):
                if "=" in piece:
                    a, _, b = piece.partition("=")
                    iters.append(_norm(a.strip()))
                    inits.append(self._ref(_norm(b.strip())))
            rest = clean[close + 1 :]
        else:
            rest = clean
        in_types: list[str] = []
        parts = split_top(rest, " : ")
        if len(parts) > 1:
            arrow = split_top(parts[-1], "->")
            it = arrow[0].strip()
            if it.startswith("(") and it.endswith(")"):
                it = it[1:-1]
            in_types = [x.strip() for x in split_top(it, ",") if x.strip()]
            if op.results:
                op.types = _result_types("scf.while", parts[-1], len(op.results))
        op.operands = inits
        op.extra.update(iter=iters, iter_types=(in_types + ["?"] * len(iters))[: len(iters)])


def parse_module(text: str) -> Module:
    from .descriptors import lower

    return _Parser(lower(text)).parse()

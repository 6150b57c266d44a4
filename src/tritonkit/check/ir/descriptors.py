"""Tensor-descriptor accesses rewritten as the pointer tiles they address, so the analyses read them as loads and
stores.

Triton 3.9 removed block pointers (``tl.make_block_ptr``) in favour of tensor descriptors
(``tl.make_tensor_descriptor``). Triton rewrote a block pointer's load or store into ``tt.load``/``tt.store`` of a
pointer tile before the TTIR the checker reads; a descriptor stays ``tt.descriptor_load``/``tt.descriptor_store`` on
a GPU with TMA (sm_90 on), which no rule followed. :func:`lower` rewrites those ops in the TTIR text the way Triton
rewrites a block pointer: per axis ``(index + tl.arange(0, BLOCK)) * stride`` in int64, laid along the axis, summed
onto the base pointer, under the mask ``0 <= index + lane < dim`` (elements outside the tensor are neither read nor
written). Only descriptors built in the kernel are rewritten (their base, shape and strides are in the IR); one
passed in from the host (``TensorDescriptor``) keeps its ops, which no rule reads.
"""

from __future__ import annotations

import re

_VAL = r"%[A-Za-z0-9_$.\-]+(?:#\d+)?"
_MAKE = re.compile(rf"^({_VAL})\s*=\s*tt\.make_tensor_descriptor\s+({_VAL})\s*,\s*\[([^\]]*)\]\s*,\s*\[([^\]]*)\]")
_CONST = re.compile(rf"^({_VAL})\s*=\s*arith\.constant\s+(-?\d+)\s*:\s*i\d+")
_LOAD = re.compile(rf"^({_VAL})\s*=\s*tt\.descriptor_load\s+({_VAL})\[([^\]]*)\]")
_STORE = re.compile(rf"^tt\.descriptor_store\s+({_VAL})\[([^\]]*)\]\s*,\s*({_VAL})")
_TENSOR = re.compile(r"tensor<((?:\d+x)+)([A-Za-z0-9_]+)>")
_PTR_ELEM = re.compile(r":\s*(?:!tt\.ptr)?<([A-Za-z0-9_]+)>")


def _names(s: str) -> list[str]:
    return re.findall(_VAL, s)


def _loc(line: str) -> str:
    """The line's trailing ``loc(...)`` (with a leading space), or ""."""
    i = line.rfind(" loc(")
    return line[i:] if i >= 0 and line.rstrip().endswith(")") else ""


class _Desc:
    def __init__(self, base: str, shape: list[str], strides: list[str], elem: str):
        self.base, self.shape, self.strides, self.elem = base, shape, strides, elem


class _Writer:
    """Emits the pointer tile and mask of one access, one op a line, under fresh names no printer makes."""

    def __init__(self, serial: int, indent: str, loc: str):
        self.prefix, self.indent, self.loc, self.n, self.lines = f"%0tkd{serial}_", indent, loc, 0, []

    def op(self, text: str) -> str:
        name = f"{self.prefix}{self.n}"
        self.n += 1
        self.lines.append(f"{self.indent}{name} = {text}{self.loc}")
        return name


def _tile(shape: list[int], elem: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{elem}>"


def _access(w: _Writer, d: _Desc, idx: list[str], block: list[int], ones: set[str]) -> tuple[str, str, str]:
    """(pointer tile, mask, its type) of an access at ``idx`` through ``d`` with tile ``block``."""
    rank = len(block)
    full_i64, full_i1 = _tile(block, "i64"), _tile(block, "i1")
    offsets, masks = [], []
    for i in range(rank):
        b = block[i]
        lane = w.op(f"tt.make_range {{end = {b} : i32, start = 0 : i32}} : tensor<{b}xi32>")
        lane = w.op(f"arith.extsi {lane} : tensor<{b}xi32> to tensor<{b}xi64>")
        at = w.op(f"arith.extsi {idx[i]} : i32 to i64")
        at = w.op(f"tt.splat {at} : i64 -> tensor<{b}xi64>")
        x = w.op(f"arith.addi {at}, {lane} : tensor<{b}xi64>")
        shape = [b]
        for j in range(rank):
            if j != i:
                new = shape[:j] + [1] + shape[j:]
                x = w.op(f"tt.expand_dims {x} {{axis = {j} : i32}} : {_tile(shape, 'i64')} -> {_tile(new, 'i64')}")
                shape = new
        t = _tile(shape, "i64")
        off = x
        if d.strides[i] not in ones:  # a unit stride (the last axis') adds the index itself, as Triton's rewrite
            s = w.op(f"tt.splat {d.strides[i]} : i64 -> {t}")
            off = w.op(f"arith.muli {x}, {s} : {t}")
        zero = w.op(f"arith.constant dense<0> : {t}")
        dim = w.op(f"arith.extsi {d.shape[i]} : i32 to i64")
        dim = w.op(f"tt.splat {dim} : i64 -> {t}")
        lo = w.op(f"arith.cmpi sge, {x}, {zero} : {t}")
        hi = w.op(f"arith.cmpi slt, {x}, {dim} : {t}")
        m = w.op(f"arith.andi {lo}, {hi} : {_tile(shape, 'i1')}")
        if shape != block:
            off = w.op(f"tt.broadcast {off} : {t} -> {full_i64}")
            m = w.op(f"tt.broadcast {m} : {_tile(shape, 'i1')} -> {full_i1}")
        offsets.append(off)
        masks.append(m)
    off, mask = offsets[0], masks[0]
    for o in offsets[1:]:
        off = w.op(f"arith.addi {off}, {o} : {full_i64}")
    for m in masks[1:]:
        mask = w.op(f"arith.andi {mask}, {m} : {full_i1}")
    ptrs = _tile(block, f"!tt.ptr<{d.elem}>")
    base = w.op(f"tt.splat {d.base} : !tt.ptr<{d.elem}> -> {ptrs}")
    ptr = w.op(f"tt.addptr {base}, {off} : {ptrs}, {full_i64}")
    return ptr, mask, ptrs


def lower(text: str) -> str:
    """The TTIR with each ``tt.descriptor_load``/``tt.descriptor_store`` through a descriptor made in the kernel
    rewritten as ``tt.load``/``tt.store`` of the pointer tile it addresses (the text unchanged where none is)."""
    if "tt.descriptor_" not in text:
        return text
    descs: dict[str, _Desc] = {}
    ones: set[str] = set()
    out: list[str] = []
    changed = False
    for serial, line in enumerate(text.splitlines()):
        s = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        if (m := _CONST.match(s)) and int(m.group(2)) == 1:
            ones.add(m.group(1))
        elif m := _MAKE.match(s):
            elem = _PTR_ELEM.search(s[m.end() :])
            if elem is not None:
                descs[m.group(1)] = _Desc(m.group(2), _names(m.group(3)), _names(m.group(4)), elem.group(1))
        elif (m := _LOAD.match(s)) and m.group(2) in descs:
            ty = _TENSOR.search(s.rsplit("->", 1)[-1]) if "->" in s else None
            d, idx = descs[m.group(2)], _names(m.group(3))
            if ty is not None and len(idx) == len(d.shape) == len(d.strides) == ty.group(1).count("x"):
                block = [int(x) for x in ty.group(1).split("x")[:-1]]
                w = _Writer(serial, indent, _loc(s))
                ptr, mask, ptrs = _access(w, d, idx, block, ones)
                out += w.lines
                out.append(f"{indent}{m.group(1)} = tt.load {ptr}, {mask} : {ptrs}{_loc(s)}")
                changed = True
                continue
        elif (m := _STORE.match(s)) and m.group(1) in descs:
            types = _TENSOR.findall(s[: s.rfind(" loc(")] if " loc(" in s else s)
            d, idx = descs[m.group(1)], _names(m.group(2))
            if types and len(idx) == len(d.shape) == len(d.strides) == types[-1][0].count("x"):
                block = [int(x) for x in types[-1][0].split("x")[:-1]]
                w = _Writer(serial, indent, _loc(s))
                ptr, mask, ptrs = _access(w, d, idx, block, ones)
                out += w.lines
                out.append(f"{indent}tt.store {ptr}, {m.group(3)}, {mask} : {ptrs}{_loc(s)}")
                changed = True
                continue
        out.append(line)
    return "\n".join(out) + "\n" if changed else text

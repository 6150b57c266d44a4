"""recompile: a kernel compiled more than once across a sweep only because Triton specialized a runtime integer
(value 1, divisibility by 16) or a pointer's alignment."""

from __future__ import annotations

from collections import defaultdict

from . import Context, Finding, RuleInfo

RULE = RuleInfo(
    "recompile", "warning", "recompiles across a sweep",
    "Triton specializes integer arguments equal to 1 or divisible by 16 and 16-byte-aligned pointers; a per-call "
    "size such as num_tokens then compiles the kernel again for new values, in the middle of serving.")

_INTS = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")


def _erase(param, entry: tuple) -> tuple:
    if getattr(param, "is_constexpr", False):
        return entry
    t = entry[0] if entry else None
    if t == "constexpr":  # an integer equal to 1
        return ("int", "i32")
    if t in _INTS:
        return ("int", "i64" if t in ("i64", "u64") else "i32")
    if isinstance(t, str) and t.startswith("*"):
        return (t,)
    return entry


def _variant(entry: tuple) -> str:
    t, attr = (tuple(entry) + (None, None))[:2]
    if t == "constexpr":
        return "equal to 1 (compiled as the constant 1)"
    if attr == 1:  # an annotated integer equal to 1 keeps its type but still gets its own key
        return "equal to 1"
    if isinstance(t, str) and t.startswith("*"):
        return "16-byte aligned" if attr == "D" else "not 16-byte aligned"
    return "divisible by 16" if attr == "D" else "not divisible by 16"


def check(ctx: Context) -> list[Finding]:
    out = []
    for info in ctx.capture.kernels.values():
        params = list(info.jit.params)
        groups: dict[tuple, dict[tuple, list]] = defaultdict(lambda: defaultdict(list))
        for ln in info.launches:
            if ln.unit is None or len(ln.spec) != len(params):
                continue
            erased = tuple(_erase(p, e) for p, e in zip(params, ln.spec))
            groups[(ln.sweep_group, erased, repr(ln.unit.options), ln.autotune)][ln.spec].append(ln)
        # one finding per sweep (its option and autotune-config variants split the same way: not counted again);
        # run_check merges the sweeps' findings on the same arguments and counts them
        seen = set()
        for (group, _erased, _opts, _at), variants in groups.items():
            if len(variants) < 2:
                continue
            specs = list(variants)
            split = [i for i in range(len(params)) if len({s[i] for s in specs}) > 1]
            names = [params[i].name for i in split]
            if (tuple(names), group) in seen:
                continue
            seen.add((tuple(names), group))
            parts, ptrs = [], []
            for i in split:
                p = params[i]
                by: dict[str, list] = defaultdict(list)
                for s, lns in variants.items():
                    vals = by[_variant(s[i])]
                    for ln in lns:
                        v = ln.int_args.get(p.name)
                        if v is not None and v not in vals:
                            vals.append(v)
                desc = "; ".join(f"{', '.join(map(str, v[:4]))}{', …' if len(v) > 4 else ''} → {k}" if v else k
                                 for k, v in by.items())
                parts.append(f"`{p.name}` ({desc})")
                if str(specs[0][i][0]).startswith("*"):
                    ptrs.append(p.name)
            exposer = next(ln for s in specs[1:] for ln in variants[s])
            fixes = []
            ints = [n for n in names if n not in ptrs]
            if ints:
                fixes.append(f"@triton.jit(do_not_specialize={ints!r})")
            if ptrs:
                fixes.append(f"@triton.jit(do_not_specialize_on_alignment={ptrs!r})")
            where = f" within sweep {group}" if group else ""
            out.append(Finding(
                RULE.id, RULE.severity, info.name, info.file, info.line,
                f"`{info.name}` compiles {len(variants)} times{where} for launches that differ only in "
                f"{' and '.join(parts)}",
                exposer.case,
                fix=" and ".join(fixes) + " if these are per-call values; keep them specialized only when the "
                    "kernel really gets faster",
                tag=",".join(names)))
    return out

"""recompile: a kernel compiled more than once across a sweep of per-call sizes: Triton specialized a runtime
integer (value 1, divisibility by 16) or a pointer's alignment, or a constexpr or launch option was computed
from a per-call size (``BLOCK = triton.next_power_of_2(num_reqs)``)."""

from __future__ import annotations

from collections import defaultdict

from ..capture.case import PER_CALL_KEYS
from . import Context, Finding, RuleInfo

RULE = RuleInfo(
    "recompile",
    "warning",
    "recompiles across a sweep",
    "Triton compiles once per specialization: integer arguments equal to 1 or divisible by 16, 16-byte-aligned "
    "pointers, every constexpr value and launch option. A per-call size that reaches any of them compiles the "
    "kernel again for new values, in the middle of serving.",
)

_INTS = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
#: launch options a per-call size may choose (each value is a compile of its own)
_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
#: compiles listed in a message, and per-call values shown for each
_SHOWN, _VALUES = 6, 4


def _width(param, entry: tuple):
    """What a sweep may not change without a compile nobody can avoid: an integer's width (a value past 2^31 is
    int64, whatever do_not_specialize says) and a pointer's dtype. An argument passed as None is NONE: a launch
    that passes a tensor there instead is a compile the caller chose (:func:`_fill_nones`)."""
    if getattr(param, "is_constexpr", False):
        return "constexpr"
    t = entry[0] if entry else None
    if _is_none(entry):
        return NONE
    if t == "constexpr":  # an integer equal to 1
        return "i32"
    if t in _INTS:
        return "i64" if t in ("i64", "u64") else "i32"
    if _is_desc(t):
        # a tensor descriptor's dtype; its block shape follows the tile config, a compile the caller chose
        return _DESC + t[len(_DESC) :].split("[", 1)[0].rstrip(">") + ">"
    return t if isinstance(t, str) and t.startswith("*") else entry


#: the width (and the variant) of an argument passed as None; how a tensor descriptor's type starts
NONE, _DESC = "None", "tensordesc<"


def _is_none(entry: tuple) -> bool:
    """A launch's spec entry for an argument passed as None (Triton keys it as a constexpr of value None)."""
    return len(entry) > 1 and entry[0] == "constexpr" and entry[1] is None


def _is_desc(t) -> bool:
    return isinstance(t, str) and t.startswith(_DESC)


def _fill_nones(widths: list[tuple]) -> list[tuple]:
    """Each launch's widths with a None argument read as the pointer (or tensor descriptor) type the other launches
    of its group pass there, where they all pass one: None for some per-call sizes and a tensor for others is a
    recompile the launcher chose, as a block size is; a pointer whose dtype changes too stays a width of its own."""
    out = []
    for i_widths in widths:
        filled = list(i_widths)
        for i, w in enumerate(i_widths):
            if w == NONE:
                ptrs = {x[i] for x in widths if isinstance(x[i], str) and x[i].startswith(("*", _DESC))}
                if len(ptrs) == 1:
                    filled[i] = ptrs.pop()
        out.append(tuple(filled))
    return out


def _variant(entry: tuple) -> str:
    t, attr = (tuple(entry) + (None, None))[:2]
    if _is_none(tuple(entry)):
        return NONE
    if _is_desc(t):
        return f"a descriptor <{t[len(_DESC) :]}"  # its dtype and block shape
    if t == "constexpr":
        return "equal to 1 (compiled as the constant 1)"
    if attr == 1:  # an annotated integer equal to 1 keeps its type but still gets its own key
        return "equal to 1"
    if isinstance(t, str) and t.startswith("*"):
        return "16-byte aligned" if attr == "D" else "not 16-byte aligned"
    return "divisible by 16" if attr == "D" else "not divisible by 16"


def _key(param, ln):
    i = [p.name for p in ln.kernel.jit.params].index(param.name)
    return repr(ln.constexprs.get(param.name)) if param.is_constexpr else ln.spec[i]


def _flags(params, launches) -> dict[tuple, list[int]]:
    """Per sweep group and case site (the line of the case a launch came from), the parameters that take several
    values within every run of its cases from that line (a forward and a backward launch from one call, a flag per
    layer in a loop): different uses of the kernel, not churn of a per-call size. One that differs within some runs
    only (a tensor descriptor passed to one of two launches at large sizes, None at small ones) is no use: what the
    per-call size moves is the churn. Launches from different lines of a case are different uses already, so a
    value that differs between them is no flag at either. Another sweep's loop says nothing of this one."""
    runs: dict[tuple, list] = defaultdict(list)
    for ln in launches:
        runs[(ln.sweep_group, repr(sorted(ln.case.items())), ln.autotune, ln.case_site)].append(ln)
    varies: dict[tuple, list[set[int]]] = defaultdict(list)
    for (group, _case, _at, site), lns in runs.items():
        varies[(group, site)].append({i for i, p in enumerate(params) if len({_key(p, ln) for ln in lns}) > 1})
    return {g: sorted(set.intersection(*sets)) for g, sets in varies.items()}


def _option_names(units) -> list[str]:
    """The launch options that differ between these compiles: the usual ones first, then any other field of the
    backend's options (``enable_fp_fusion``, ``launch_pdl``, ...)."""
    fields: list[str] = list(_OPTIONS)
    for u in units:
        fields += [k for k in sorted(vars(u.options)) if k not in fields]
    return [o for o in fields if len({repr(getattr(u.options, o, None)) for u in units}) > 1]


def _short(vals: list) -> str:
    return ", ".join(map(str, vals[:_VALUES])) + (", …" if len(vals) > _VALUES else "")


def _inferred_note(ln) -> str:
    """When the sweep was inferred (a case with no `sweep=` and no parameter named like a per-call size: all its
    parameters were taken as per-call), the declaration that says otherwise."""
    keys = list(ln.case)
    if not ln.sweep_inferred or "op" in ln.case or not keys:
        return ""
    return (
        f". The case declares no `sweep=` and none of its parameters is named like a per-call size "
        f"({', '.join(PER_CALL_KEYS[:3])}, ...), so all of them ({', '.join(f'`{k}`' for k in keys)}) were taken "
        f"as values one deployment sees from call to call: if some are not (a dtype, a model size, a feature "
        f"flag), declare the ones that are, `sweep={keys[:1]!r}`, or `sweep=[]` for none"
    )


def check(ctx: Context) -> list[Finding]:
    out = []
    for info in ctx.capture.kernels.values():
        params = list(info.jit.params)
        launches = [ln for ln in info.launches if ln.unit is not None and len(ln.spec) == len(params)]
        flags = _flags(params, launches)
        # a use of the kernel: its sweep, the case line it came from and the values of that line's flags
        uses = [
            (
                ln.sweep_group,
                ln.case_site,
                tuple(_key(params[i], ln) for i in flags.get((ln.sweep_group, ln.case_site), ())),
            )
            for ln in launches
        ]
        by_use: dict[tuple, list[int]] = defaultdict(list)
        for n, (ln, use) in enumerate(zip(launches, uses)):
            by_use[(use, ln.autotune)].append(n)
        widths: list[tuple] = [()] * len(launches)
        for members in by_use.values():
            filled = _fill_nones([tuple(_width(p, e) for p, e in zip(params, launches[n].spec)) for n in members])
            for n, w in zip(members, filled):
                widths[n] = w
        groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for ln, use, w in zip(launches, uses, widths):
            groups[(w, use, ln.autotune)][ln.unit.key].append(ln)
        # one finding per sweep and use of the kernel (an autotuner's configs split the same way: not counted
        # again); run_check merges the findings on the same arguments and counts them
        seen = set()
        for (_w, use, _at), units in groups.items():
            if len(units) < 2:
                continue
            group = use[0]
            firsts = [lns[0] for lns in units.values()]
            split = [
                i
                for i in range(len(params))
                if len({ln.spec[i] for ln in firsts}) > 1
                or (params[i].is_constexpr and len({repr(ln.constexprs.get(params[i].name)) for ln in firsts}) > 1)
            ]
            opts = _option_names([ln.unit for ln in firsts])
            names = [params[i].name for i in split] + opts
            if (tuple(names), group, use) in seen:
                continue
            seen.add((tuple(names), group, use))
            parts, ints, ptrs, consts, optional = [], [], [], [], []
            for i in split:
                p = params[i]
                if p.is_constexpr:
                    vals = list(dict.fromkeys(repr(ln.constexprs.get(p.name)) for ln in firsts))
                    consts.append(p.name)
                    parts.append(f"constexpr `{p.name}` ({len(vals)} values: {_short(vals)})")
                    continue
                by: dict[str, list] = defaultdict(list)
                for lns in units.values():
                    for ln in lns:
                        v = ln.int_args.get(p.name)
                        vals = by[_variant(ln.spec[i])]
                        if v is not None and v not in vals:
                            vals.append(v)
                if NONE in by:
                    # a tensor for some per-call sizes and None for others: the launcher's choice, not alignment
                    optional.append(p.name)
                    parts.append(f"`{p.name}` (None for some calls, a tensor for others)")
                    continue
                kind = str(firsts[0].spec[i][0])
                if not _is_desc(kind):  # a descriptor's block shape follows the tile's constexprs
                    (ptrs if kind.startswith("*") else ints).append(p.name)
                parts.append(f"`{p.name}` ({'; '.join(f'{_short(v)} → {k}' if v else k for k, v in by.items())})")
            for o in opts:
                vals = list(dict.fromkeys(repr(getattr(ln.unit.options, o, None)) for ln in firsts))
                parts.append(f"launch option {o} ({_short(vals)})")
            if not parts:  # the cache key differs in something neither the signature nor the options show
                parts.append("something in Triton's cache key this rule cannot name")
            # what drives each compile: the per-call values of the launches that made it
            listed = []
            for n, lns in enumerate(list(units.values())[:_SHOWN], 1):
                keys = lns[0].sweep_keys
                seen_vals = []
                for ln in lns:
                    v = tuple(ln.case.get(k) for k in keys)
                    if v not in seen_vals:
                        seen_vals.append(v)
                what = ", ".join(
                    f"{params[i].name}={lns[0].constexprs[params[i].name]!r}"
                    for i in split
                    if params[i].is_constexpr and params[i].name in lns[0].constexprs
                )
                # a pointer's alignment is no per-call value the listing could show: each compile says its own
                aligned = ", ".join(
                    f"{params[i].name} {_variant(lns[0].spec[i])}" for i in split if params[i].name in ptrs
                )
                what = ", ".join(x for x in (aligned, what) if x)
                named = ", ".join(f"{o}={getattr(lns[0].unit.options, o)}" for o in opts)
                what += (", " if what and opts else "") + named
                if len(keys) == 1:
                    by_case = f"{keys[0]}={_short([v[0] for v in seen_vals])}"
                else:
                    by_case = _short(["(" + ", ".join(f"{k}={x}" for k, x in zip(keys, v)) + ")" for v in seen_vals])
                listed.append(f"#{n} {by_case}" + (f" ({what})" if what else ""))
            more = f"; {len(units) - _SHOWN} more" if len(units) > _SHOWN else ""
            exposer = list(units.values())[1][0]
            fixes = []
            if ints:
                fixes.append(f"@triton.jit(do_not_specialize={ints!r}) if they are per-call values")
            if ptrs:
                fixes.append(f"@triton.jit(do_not_specialize_on_alignment={ptrs!r})")
            if optional:
                fixes.append(
                    f"pass {', '.join(f'`{n}`' for n in optional)} the same way on every call (a tensor, with a "
                    f"flag or an empty one where it is unused) or choose None from the model's sizes, not the "
                    f"per-call size"
                )
            if consts or opts:
                fixes.append(
                    f"make {', '.join(f'`{n}`' for n in consts + opts)} a function of the model's sizes "
                    f"(or of a few coarse buckets), not of the per-call size; a value needed per call "
                    f"belongs in a runtime argument and a loop"
                )
            where = f" within sweep {group}" if group else ""
            out.append(
                Finding(
                    RULE.id,
                    RULE.severity,
                    info.name,
                    info.file,
                    info.line,
                    f"`{info.name}` compiles {len(units)} times{where}, split by {' and '.join(parts)}: "
                    f"{'; '.join(listed)}{more}{_inferred_note(exposer)}",
                    exposer.case,
                    fix="; ".join(fixes) + " (keep a specialization only where the kernel really gets faster)",
                    tag=",".join(names),
                )
            )
    return out

"""autotune-cost: what an autotuned kernel costs at startup: configs x distinct keys compiles (and benchmarks),
with the compile time of one config measured here."""

from __future__ import annotations

from . import Context, Finding, RuleInfo

RULE = RuleInfo(
    "autotune-cost",
    "info",
    "autotuning startup cost",
    "Every distinct autotune key compiles and benchmarks every config before the first result: startup a user "
    "pays, and again on every new key in the middle of serving.",
)


def check(ctx: Context) -> list[Finding]:
    out = []
    for rec in ctx.capture.autotuners.values():
        if not rec.keys:
            continue
        runs = sum(rec.keys.values())
        compiles = len(rec.units)
        ok = [u for u in rec.units if not u.compiled.error]
        # TTIR is lowered for every config, TTGIR timed on the first: one config is the mean of each
        ttir = [u.compiled.seconds for u in ok]
        ttgir = [u.compiled.ttgir_seconds for u in ok if u.compiled.ttgir_seconds is not None]
        per = (sum(ttir) / len(ttir) if ttir else 0.0) + (sum(ttgir) / len(ttgir) if ttgir else 0.0)
        keys = ", ".join(rec.key_names) or "(none)"
        case = next((u.launches[0].case for u in rec.units if u.launches), {})
        out.append(
            Finding(
                RULE.id,
                RULE.severity,
                rec.name,
                rec.file,
                rec.line,
                f"`{rec.name}` is autotuned over {rec.n_configs} configs; the cases hit {len(rec.keys)} distinct keys "
                f"(key={keys} plus argument dtypes): {runs} benchmark runs and {compiles} compiles (one per config and "
                f"specialization) at startup. One config takes {per * 1000:.0f} ms here to TTGIR (frontend + TTIR + "
                f"TTGIR passes on this CPU; LLVM and ptxas add more on the GPU host): at least {compiles * per:.1f} s "
                f"of compiling before the first result, plus the benchmarks",
                case,
                fix="prune configs (`prune_configs_by`), coarsen the key (bucket sizes, e.g. next power of 2), or pick "
                "the config with a small heuristic; autotune only matmul-like kernels",
                tag="autotune",
            )
        )
    return out

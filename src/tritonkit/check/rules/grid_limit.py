"""grid-limit: a launch whose grid[1] or grid[2] exceeds 65535, grid[0] exceeds 2^31 - 1, or one that is below 1."""

from __future__ import annotations

from . import Context, Finding, RuleInfo

RULE = RuleInfo(
    "grid-limit",
    "error",
    "launch grid over the CUDA limit",
    "CUDA caps gridDim.y and gridDim.z at 65535 (gridDim.x at 2^31-1): the launch fails with an invalid-argument "
    "error, or, where the error is not checked, the kernel silently does not run.",
)

LIMITS = (2**31 - 1, 65535, 65535)


def _site(ln, info) -> tuple[str, int]:
    return ln.site or (info.file, info.line)


def check(ctx: Context) -> list[Finding]:
    """One finding per launch site and dimension: a grid is the caller's, so a new call site of a kernel already
    flagged (or baselined) elsewhere is a finding of its own, at its own line."""
    out = _empty_dims(ctx)
    for info in ctx.capture.kernels.values():
        # (site, dim) -> (max value, first launch, number of launches), in the order the sites were first seen
        worst: dict[tuple[tuple[str, int], int], tuple[int, object, int]] = {}
        for ln in info.launches:
            if not ln.grid:
                continue
            for dim, lim in enumerate(LIMITS):
                v = ln.grid[dim]
                if v > lim:
                    k = (_site(ln, info), dim)
                    mx, first, n = worst.get(k, (v, ln, 0))
                    worst[k] = (max(mx, v), first, n + 1)
        for ((file, line), dim), (mx, first, n) in worst.items():
            v = first.grid[dim]
            more = f"; {n} launches exceed it, up to {mx:,}" if n > 1 else ""
            out.append(
                Finding(
                    RULE.id,
                    RULE.severity,
                    info.name,
                    file,
                    line,
                    f"`{info.name}` is launched with grid[{dim}] = {v:,}, over the CUDA limit of {LIMITS[dim]:,} "
                    f"for grid[{dim}]{more}",
                    first.case,
                    fix=(
                        "put the dimension that grows with tokens or sequences in grid[0] and keep grid[1]/grid[2] "
                        "for model-bounded sizes (heads, splits), or loop over it inside the program"
                        if dim
                        else "tile more work per program so grid[0] stays below 2^31"
                    ),
                    tag=f"grid[{dim}]",
                    count=n,
                )
            )
    return out


def _empty_dims(ctx: Context) -> list[Finding]:
    """Launches with a negative grid dimension, or 0 in grid[1]/grid[2] beside a non-empty grid[0]: on a GPU the
    launch fails or runs no program. (grid[0] = 0 is an empty batch, which launches nothing on purpose.) One
    finding per launch site."""
    out = []
    for info in ctx.capture.kernels.values():
        by_site: dict[tuple[str, int], list] = {}
        for ln in info.launches:
            for d in range(3) if ln.grid else ():
                if ln.grid[d] < 0 or (d and ln.grid[d] == 0 and ln.grid[0] > 0):
                    by_site.setdefault(_site(ln, info), []).append((ln, d))
        for (file, line), bad in by_site.items():
            out.append(_empty_finding(info, file, line, bad))
    return out


def _empty_finding(info, file: str, line: int, bad: list) -> Finding:
    first, dim = bad[0]
    n = len({id(ln) for ln, _ in bad})
    more = f"; {n} launches have an empty or negative dimension" if n > 1 else ""
    return Finding(
        RULE.id,
        RULE.severity,
        info.name,
        file,
        line,
        f"`{info.name}` is launched with grid[{dim}] = {first.grid[dim]} (grid {first.grid}): "
        f"{'a negative dimension is an invalid launch' if first.grid[dim] < 0 else 'no program runs'}{more}",
        first.case,
        fix="compute every grid dimension as at least 1 (triton.cdiv of a positive size, max(1, n))",
        tag=f"grid[{dim}]<1",
        count=n,
    )

"""The validate table and progress bar (rich when installed, plain text otherwise)."""

from __future__ import annotations

import contextlib
import sys


def _fmt(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.3g}"


@contextlib.contextmanager
def progress(total: int):
    try:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        rich_ok = False
    else:
        rich_ok = sys.stderr.isatty()
    if rich_ok:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      transient=True) as p:
            task = p.add_task("validate", total=total)

            def advance(r):
                p.update(task, advance=1, description=f"{r.op} {r.dtype} {r.family}")
            yield advance
        return
    done = [0]

    def advance(r):
        done[0] += 1
        mark = "." if r.passed else "F"
        sys.stderr.write(mark)
        if done[0] % 80 == 0 or done[0] == total:
            sys.stderr.write(f" {done[0]}/{total}\n")
        sys.stderr.flush()
    yield advance


def print_table(results, failures_only: bool = False) -> None:
    rows = [r for r in results if not (failures_only and r.passed)]
    if not rows:
        return
    head = ("op", "shape", "dtype", "family", "error", "rtol/atol", "result")
    data = [(r.op, r.shape, r.dtype, r.family, _fmt(r.error), f"{r.rtol:g}/{r.atol:g}",
             "pass" if r.passed else "FAIL") for r in rows]
    widths = [max(len(h), *(len(d[i]) for d in data)) for i, h in enumerate(head)]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line)
    print("-" * len(line))
    for d, r in zip(data, rows):
        print("  ".join(c.ljust(w) for c, w in zip(d, widths)))
        if not r.passed:
            print(f"    {r.detail}")

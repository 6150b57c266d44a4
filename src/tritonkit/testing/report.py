"""The validate table and progress bar (rich when installed, plain text otherwise)."""

from __future__ import annotations

import contextlib
import sys
import time
import textwrap


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
        from rich.progress import TimeRemainingColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            transient=True,
        ) as p:
            task = p.add_task("validate", total=total)

            def advance(r):
                p.update(task, advance=1, description=f"{r.op} {r.dtype} {r.family}")

            yield advance
        return
    done = [0]
    t0 = time.perf_counter()

    def advance(r):
        done[0] += 1
        mark = "." if r.passed else "F"
        sys.stderr.write(mark)
        if done[0] % 80 == 0 or done[0] == total:
            elapsed = time.perf_counter() - t0
            left = elapsed / done[0] * (total - done[0])
            tail = f", about {_span(left)} left" if done[0] < total else ""
            sys.stderr.write(f" {done[0]}/{total} in {_span(elapsed)}{tail}\n")
        sys.stderr.flush()

    yield advance


def _span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


WIDTH = 120  # the table fits a 120-column terminal: a long shape is cut, a failure's detail wrapped


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "\u2026"


def print_table(results, failures_only: bool = False, every_row: bool = False, width: int = WIDTH) -> None:
    """One row per failed case with its detail below; the passing cases one line per op, or one row each with
    ``every_row``; none with ``failures_only``."""
    rows = [r for r in results if every_row or not r.passed]
    if rows:
        head = ("op", "shape", "dtype", "family", "error", "rtol/atol", "result")
        data = [
            [r.op, r.shape, r.dtype, r.family, _fmt(r.error), f"{r.rtol:g}/{r.atol:g}", "pass" if r.passed else "FAIL"]
            for r in rows
        ]
        widths = [max(len(h), *(len(d[i]) for d in data)) for i, h in enumerate(head)]
        # the shape column takes what the others leave of the width
        widths[1] = max(len(head[1]), min(widths[1], width - sum(widths) + widths[1] - 2 * (len(head) - 1)))
        line = "  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()
        print(line)
        print("-" * len(line))
        for d, r in zip(data, rows):
            d[1] = _cut(d[1], widths[1])
            print("  ".join(c.ljust(w) for c, w in zip(d, widths)).rstrip())
            if not r.passed:
                # a failure's shape whole (the row cuts a long one), then what failed, both wrapped
                detail = r.detail if d[1] == r.shape else f"{r.detail} [shape {r.shape}]"
                print(
                    textwrap.fill(
                        detail,
                        width,
                        initial_indent="    ",
                        subsequent_indent="      ",
                        break_long_words=True,
                        break_on_hyphens=False,
                    )
                )
    if every_row or failures_only:
        return
    passed: dict[str, list] = {}
    for r in results:
        if r.passed:
            passed.setdefault(r.op, []).append(r)
    if passed and rows:
        print()
    for op, rs in passed.items():
        total = sum(r.op == op for r in results)
        w = max(rs, key=lambda r: r.error)
        # wrapped, never cut: the worst case's shape is what a reader looks up
        print(
            textwrap.fill(
                f"{op}: {len(rs)} of {total} cases pass, worst error {_fmt(w.error)} ({w.dtype} {w.family} "
                f"{w.shape}); --all lists them",
                width,
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
        )

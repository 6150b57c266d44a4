"""Integer helpers for the ops' host paths (grids, block sizes).

Triton 3.6's ``triton.cdiv`` and ``triton.next_power_of_2`` are ``ConstexprFunction`` objects: about 1.7 us a call
on the host, several per op call. These are the same arithmetic in plain Python (same results for n >= 0)."""


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 0

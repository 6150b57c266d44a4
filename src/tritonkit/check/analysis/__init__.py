"""What the rules ask of a kernel's IR: integer ranges (``ranges``, ``intervals``, ``transfer``, ``conditions``),
where pointers point (``pointers``, ``addresses``), the order of memory accesses (``memory``), and how far each walk
goes (``budgets``).

Imports ``ir`` and ``capture`` (launches, argument views), never ``rules`` or the driver above them.
"""

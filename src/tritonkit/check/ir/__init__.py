"""Reading the TTIR: ``mlir`` parses Triton's printed MLIR, ``descriptors`` rewrites tensor-descriptor accesses as
pointer tiles, ``locations`` resolves ``loc(...)`` to frames and ``source`` maps a frame back to the Python expression.

The bottom layer of the checker: it imports no other folder of ``check/`` (``tests/test_boundaries.py``).
"""

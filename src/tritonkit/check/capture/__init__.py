"""Running the user's code and recording what it launches: ``case`` (the decorator), ``launches`` (``Capture``:
launches intercepted and compiled instead of run), ``target`` (TTIR for a GPU arch without a GPU), ``views`` (the
bytes each tensor argument reaches), ``isolate`` and ``watch`` (user code kept from ending or hanging the run).

Imports only ``ir`` of the other folders, and nothing at import: ``tritonkit.case`` loads ``case`` without Triton.
"""

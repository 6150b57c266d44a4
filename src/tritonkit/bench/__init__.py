"""``tritonkit bench`` and ``tritonkit inductor``: decode-to-prefill sweeps against the card's measured ceilings.

Modules: ``stats`` (work arithmetic, target formula; pure), ``timing`` (CUDA-graph and eager timing over rotating
input sets), ``ceilings`` (copy bandwidth, matmul rate, launch floor; cached per GPU and driver), ``providers``
(tritonkit, eager, Inductor, vLLM; correctness checks; compile counts), ``startup`` (fresh-process first call),
``runner`` (the sweep), ``report`` (JSON, tables, summary), ``compare``, ``plot``, ``cli``, ``inductor_cli``.
Nothing heavy is imported here: the startup child's clock starts before torch is imported.
"""

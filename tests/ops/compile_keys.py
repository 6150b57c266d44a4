"""Test helpers: record an op's launches without running them, and compute the JIT cache keys Triton would compile
them under for an sm_90 GPU. Needs no GPU, so "one compile per model config" is checked under the interpreter too."""


class Recorder:
    """Stands in for a jit kernel: records each launch's arguments without running it."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))


def specialization_keys(kernel, launches) -> set:
    """The keys Triton would compile these launches under on an sm_90 GPU (what the JIT cache is keyed by)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    if not isinstance(kernel, JITFunction):  # the interpreter's wrapper keeps the decorator's arguments
        kernel = JITFunction(kernel.fn, do_not_specialize=kernel.kwargs.get("do_not_specialize"))
    binder = create_function_from_signature(kernel.signature, kernel.params, make_backend(GPUTarget("cuda", 90, 32)))
    keys = set()
    for _, args, kwargs in launches:
        _, specialization, options = binder(*args, **kwargs)
        keys.add((repr(specialization), repr(options)))
    return keys

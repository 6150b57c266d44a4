import os

import torch

# No GPU: kernels run under Triton's interpreter. It must be on before any kernel module is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # the interpreter runs one program at a time; torch's intra-op threads only contend on small tensors
    torch.set_num_threads(1)

import pytest  # noqa: E402

import tritonkit  # noqa: E402

# Subprocesses (`python -m tritonkit ...`, often from a temporary cwd) must run the tritonkit under test, whatever
# installed copy or relative PYTHONPATH entry the test process found it through.
_SRC = os.path.dirname(os.path.dirname(os.path.abspath(tritonkit.__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_SRC] + [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")


#: tests marked `network` resolve installs against PyPI (minutes, and a network): opt in with this set to 1
NETWORK_ENV = "TRITONKIT_NETWORK_TESTS"


def pytest_collection_modifyitems(config, items):
    skip_net = pytest.mark.skip(reason=f"needs PyPI: set {NETWORK_ENV}=1 to run")
    if os.environ.get(NETWORK_ENV, "") != "1":
        for item in items:
            if "network" in item.keywords:
                item.add_marker(skip_net)
    if ON_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

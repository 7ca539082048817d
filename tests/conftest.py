"""Test-wide setup: run Triton kernels through the interpreter when there is no GPU.

TRITON_INTERPRET must be set before any @triton.jit decorator runs, so it is set
here, before test modules (and the generated kernel files they load) import triton.
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest_plugins = ["pytester"]


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

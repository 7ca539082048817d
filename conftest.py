"""Root conftest: applies to tests/ and examples/.

TRITON_INTERPRET must be set before any @triton.jit decorator runs, so without a
GPU it is set here, before test modules (and generated kernel files) import triton.
GPU-marked tests skip cleanly without CUDA.
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

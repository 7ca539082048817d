"""The root conftest gives each xdist worker its share of the cores for torch's threads."""

import os
from pathlib import Path

import pytest
import torch

ROOT_CONFTEST = str(Path(__file__).resolve().parents[1] / "conftest.py")


@pytest.fixture
def root(pytestconfig):
    """The root conftest as this run loaded it."""
    return next(p for p in pytestconfig.pluginmanager.get_plugins()
                if getattr(p, "__file__", None) == ROOT_CONFTEST)


@pytest.mark.parametrize(("workers", "cores", "share"), [
    ("2", 2, 1), ("15", 16, 1), ("4", 16, 4), ("3", 16, 5), ("8", 4, 1), (None, 16, None)])
def test_a_worker_takes_its_share_of_the_cores(root, workers, cores, share):
    assert root.worker_threads(workers, cores) == share


def test_this_run_gives_torch_the_share_or_leaves_its_choice(root):
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if root.THREADS_SET is None:  # not an xdist worker, or the user set OMP_NUM_THREADS
        assert workers is None or root.THREADS_SET is None and "OMP_NUM_THREADS" in os.environ
        return
    assert root.THREADS_SET == root.worker_threads(workers, root.cores())
    assert os.environ["OMP_NUM_THREADS"] == str(root.THREADS_SET)
    assert torch.get_num_threads() == root.THREADS_SET

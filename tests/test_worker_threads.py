"""The root conftest gives each xdist worker its share of the cores for torch's threads."""

import os
from pathlib import Path

import pytest
import torch

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


@pytest.fixture
def root(pytestconfig):
    """The root conftest as this run loaded it."""
    return next(p for p in pytestconfig.pluginmanager.get_plugins()
                if getattr(p, "__file__", None) and Path(p.__file__).resolve() == ROOT_CONFTEST)


@pytest.mark.parametrize(("workers", "cores", "share"), [
    ("2", 2, 1), ("15", 16, 1), ("4", 16, 4), ("3", 16, 5), ("8", 4, 1), (None, 16, None)])
def test_a_worker_takes_its_share_of_the_cores(root, workers, cores, share):
    assert root.worker_threads(workers, cores) == share


def test_this_run_gives_torch_the_share_or_leaves_the_users_choice(root):
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None:  # not an xdist worker: nothing set
        assert root.THREADS_SET is None
    elif root.THREADS_SET is None:  # the user's OMP_NUM_THREADS, which torch then follows
        assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])
    else:
        assert root.THREADS_SET == root.worker_threads(workers, root.cores())
        assert os.environ["OMP_NUM_THREADS"] == str(root.THREADS_SET)
        assert torch.get_num_threads() == root.THREADS_SET

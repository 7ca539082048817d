"""Tiny models and project files for the pytester runs of the fusion plugin.

Every variant keeps the chain `mul → relu → add` on lines 10-12 of model.py, so
a baseline made from one variant is compared with another at the same lines.
"""

import json
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

# Installed, pytest finds the plugin through its `pytest11` entry point; a checkout run with
# PYTHONPATH=. (no install) loads it by name in the inner pytest runs.
PLUGIN_ARGS = () if any(ep.value.startswith("pytest_fusion") for ep in
                        entry_points(group="pytest11")) else ("-p", "pytest_fusion.plugin")

HEAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.b = nn.Parameter(torch.zeros({bias}))
    def forward(self, x):
"""

BODIES = {
    "base": "y = x * 2.0\ny = F.relu(y)\nreturn y + self.b",
    # In place on the input (the caller sees it): no rewrite out of place may drop that.
    "inplace": "y = x.mul_(2.0)\ny = F.relu(y)\nreturn y + self.b",
    "split": "y = x * 2.0\ny = F.relu(y)\nreturn torch.tanh(self.lin(y) + self.b)",
    "dag": "y = x * 2.0\nr = F.relu(y)\nreturn r + y",
    "newrej": "y = x * 2.0\ny = F.relu(y)\ny = y + self.b\na = torch.sigmoid(self.lin(y))\n"
              "return F.softmax(a * 3.0, dim=None)",
    "grown": "y = x * 2.0\ny = F.relu(y)\nreturn torch.sigmoid(y + self.b)",
    # `mul` cut off by a call the kernel cannot take; the rest fuses with more ops than before.
    "moved": "y = torch.roll(x * 2.0, 1, -1)\ny = F.relu(y)\n"
             "return torch.sigmoid(y + self.b) * 3.0",
    # A branch on a shape: FX symbolic tracing cannot follow it, torch.export can.
    "branch": "y = x * 2.0\ny = F.relu(y)\nreturn y + self.b if x.shape[-1] > 4 else y",
    "branch-split": "y = x * 2.0\ny = F.relu(y)\n"
                    "return torch.tanh(self.lin(y) + self.b) if x.shape[-1] > 4 else y",
}

MARKED_TEST = """\
import pytest
import {module}

@pytest.mark.fusion_check({module}.Net, (4, 8){kwargs})
def {name}():
    pass
"""

# A measurement provider for CPU tests: kernel timings come from timings.json.
MEASURE_CONFTEST = """\
import json
import pathlib

def pytest_fusion_measure(analysis, config):
    path = pathlib.Path(config.rootpath, "timings.json")
    if not path.exists():
        return {}  # a machine that times nothing, even where CUDA is present
    t = json.loads(path.read_text())
    return {"device": t["device"],
            "clusters": [{"index": c.index, "kernel_us": t["kernel_us"],
                          "eager_us": [100.0] * len(t["kernel_us"]), "gbps": 1000.0,
                          "regime": "dram-bound"} for c in analysis.clusters],
            "model": {"fused_us": t["kernel_us"], "eager_us": [100.0] * len(t["kernel_us"])}}
"""

# An ini for projects with faked timings: their tiny models move less than the default
# `fusion_timing_min_bytes`, under which timings are not judged.
TIMED_INI = "[pytest]\nfusion_timing_min_bytes = 0\n"
H200 = {"name": "NVIDIA H200", "capability": [9, 0]}
# Kernel timings (µs) the fake measure hook reports
SAMPLES = [40.0, 40.3, 39.8, 40.1, 40.6, 39.9]


def model_source(variant: str, bias: str = "8") -> str:
    return HEAD.format(bias=bias) + textwrap.indent(BODIES[variant], " " * 8) + "\n"


def marked_test(name: str = "test_net", module: str = "model", **kwargs) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return MARKED_TEST.format(module=module, name=name, kwargs=extra)


def timed_record(model_speedup: float, **fields):
    """A passing test's record whose model timings were checked, for the report's rows."""
    from pytest_fusion.records import TestRecord

    return TestRecord("t.py::t", "pass", "Net", clusters=1, saved_bytes=0,
                      timing_note="timings checked", model_speedup=model_speedup, **fields)


def write_timings(root: Path, kernel_us: list[float], device: dict = H200) -> None:
    (root / "timings.json").write_text(json.dumps({"device": device, "kernel_us": kernel_us}))


def baselines(root: Path) -> dict[str, Path]:
    """Baseline files by the test id recorded inside them."""
    import yaml

    return {yaml.safe_load(p.read_text())["test"]: p
            for p in sorted((root / "fusion_baselines").glob("*.yaml"))}


def warm_torch() -> None:
    """Run one analysis before pytester snapshots sys.modules.

    pytester removes the modules an in-process run imported; torch's lazily
    imported internals must not be imported a second time (that aborts).
    """
    import torch

    import fusion_core

    fusion_core.analyze(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Sigmoid()), (2, 4))


def make_proj(pytester, monkeypatch, test_source: str | None = None):
    """A project with model.py (variant `base`) and one marked test, no baselines yet."""
    import sys

    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # model.py is rewritten between runs
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makeini(TIMED_INI)
    pytester.makepyfile(model=model_source("base"), test_net=test_source or marked_test())
    return pytester


def run(p, *args, cache: bool = False):
    """An in-process pytest run of the project `p` with the plugin loaded."""
    # hypothesis' plugin imports all of hypothesis at the end of every run, and pytester
    # unloads it again after each run: leave it out of the inner runs.
    no_cache = () if cache else ("-p", "no:cacheprovider")
    return p.runpytest(*no_cache, "-p", "no:hypothesispytest", *PLUGIN_ARGS, *args)


def baseline_notes(output: str) -> list[str]:
    """The lines of pytest's "fusion baselines" section, without the run-wide
    `no timing judged on <GPU>: …` notice a CUDA machine adds when no test judged a timing
    (these tiny models are never timed): [] where the plugin had nothing to say about the
    baselines themselves."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if " fusion baselines " in line
                  and line.startswith("-")), None)
    if start is None:
        return []
    notes = []
    for line in lines[start + 1:]:
        if line.startswith(("=", "-")) and line.strip("=- ") != line.strip():
            break
        if line.strip() and not line.startswith("no timing judged on "):
            notes.append(line)
    return notes

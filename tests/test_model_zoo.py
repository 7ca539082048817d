"""benchmarks/model_zoo.py's own machinery on small models of ours (no torchvision needed):
the per-model time limit, the budget, the phase seconds, validation without timings and the
"applied" column (what `--apply` would edit of the verified clusters)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import model_zoo  # noqa: E402


class Small(nn.Module):
    def forward(self, x):
        return torch.relu(x * 2) + 1  # one pointwise cluster


def stall(lib):
    """A model build that hangs, inside the kind of `except Exception` library code has."""
    try:
        time.sleep(120)
    except Exception:  # noqa: BLE001 - the limit must get through this
        pass
    return Small()


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """The table's rows by model name, each as {column: cell}."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| model |"):
            cells = [c.strip() for c in line.strip("| ").split(" | ")]
            rows[cells[0]] = dict(zip(model_zoo.COLUMNS, cells, strict=True))
    return rows


@pytest.fixture
def our_zoo(monkeypatch):
    """Replace the zoo with `entries`; their library is torch.nn, always importable."""
    monkeypatch.setattr(model_zoo, "_library", lambda name: nn)

    def use(*entries):
        monkeypatch.setattr(model_zoo, "ZOO", entries)
    return use


def test_a_model_over_its_limit_gets_its_row_and_the_next_model_runs(our_zoo, tmp_path,
                                                                       capsys):
    our_zoo(model_zoo.ZooModel("stalls", "torch", stall),
            model_zoo.ZooModel("small", "torch", lambda lib: Small()))
    out = tmp_path / "zoo.md"
    start = time.perf_counter()
    assert model_zoo.main(["--out", str(out), "--model-timeout", "3", "--no-inductor",
                           "--no-validate"]) == 0
    assert time.perf_counter() - start < 60  # not the 120 s the build sleeps
    rows = table_rows(out.read_text())
    assert rows["stalls"]["frontend"] == "not finished (over 3 s)"
    assert 3 <= float(rows["stalls"]["wall s"]) < 30
    assert rows["small"]["frontend"] in ("fx", "export") and rows["small"]["clusters"] == "1"
    log = capsys.readouterr().err
    assert "torch/stalls: not finished (over 3 s); build 3" in log
    assert "torch/small: fx; build" in log and ", analysis " in log


def test_models_left_when_the_budget_is_spent_get_not_run_rows(our_zoo, tmp_path):
    our_zoo(model_zoo.ZooModel("stalls", "torch", stall),
            model_zoo.ZooModel("small", "torch", lambda lib: Small()))
    out = tmp_path / "zoo.md"
    assert model_zoo.main(["--out", str(out), "--budget", "2", "--no-inductor",
                           "--no-validate"]) == 0
    rows = table_rows(out.read_text())
    assert rows["stalls"]["frontend"] == "not finished (over 2 s)"  # cut to the budget
    assert rows["small"]["frontend"] == "not run (the 2 s budget was spent)"


def test_validation_past_the_limit_is_cut_and_asked_for_no_timings(monkeypatch):
    from fusion_core.validate import run

    asked = []

    def slow_validate(analysis, *args, **kwargs):
        asked.append(kwargs.get("timing"))
        try:
            time.sleep(120)
        except Exception:  # noqa: BLE001 - validation records failures and goes on
            pass

    monkeypatch.setattr(model_zoo, "_library", lambda name: nn)
    monkeypatch.setattr(run, "validate", slow_validate)
    phases = model_zoo.Phases()
    row = model_zoo.run_one(model_zoo.ZooModel("small", "torch", lambda lib: Small()),
                            inductor=False, check=True, limit=3, phases=phases)
    assert asked == [False]
    assert row["clusters"] == "1" and float(row["analysis s"]) < 3
    assert row["kernels verified"] == "not finished (over 3 s)"
    assert "model numerics" not in row
    assert list(phases.seconds) == ["build", "analysis", "validation"]
    assert phases.seconds["validation"] >= 2


def test_a_finished_model_gets_its_verdicts_and_wall_seconds(monkeypatch):
    """The real validation, untimed (under the interpreter here, natively on a GPU)."""
    monkeypatch.setattr(model_zoo, "_library", lambda name: nn)
    phases = model_zoo.Phases()
    row = model_zoo.run_one(model_zoo.ZooModel("small", "torch", lambda lib: Small()),
                            inductor=False, check=True, limit=300, phases=phases)
    assert row["kernels verified"] == "1/1" and row["model numerics"] == "pass"
    assert row["applied"] == "1 of 1"  # Small's one line maps exactly, in this file
    assert float(row["wall s"]) >= phases.seconds["validation"] > 0
    assert phases.line().startswith("build ") and ", validation " in phases.line()
    assert ", source edits " in phases.line()


LIBRARY_MODEL = """
import torch
from torch import nn


class Installed(nn.Module):
    def forward(self, x):
        return torch.relu(x * 2) + 1
"""


def test_a_verified_cluster_in_an_installed_library_counts_as_not_applied(
        monkeypatch, tmp_path):
    """The same code as Small, but from a site-packages folder: a pointer, as in the CLI."""
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "zoo_installed_model.py").write_text(LIBRARY_MODEL)
    spec = importlib.util.spec_from_file_location("zoo_installed_model",
                                                  lib / "zoo_installed_model.py")
    installed = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, installed)  # gone after the test
    spec.loader.exec_module(installed)
    monkeypatch.setattr(model_zoo, "_library", lambda name: installed)
    row = model_zoo.run_one(model_zoo.ZooModel("installed", "torch",
                                               lambda m: m.Installed()),
                            inductor=False, check=True, limit=300)
    assert row["kernels verified"] == "1/1"
    # --apply edits no library file; with only that check lifted, the line maps exactly.
    assert row["applied"] == "0 of 1 (1 if yours)"


def test_the_applied_column_counts_the_apply_plan_of_the_verified_clusters(monkeypatch):
    """Two clusters, one failing numerics: it is not counted in either number."""
    from fusion_core.sourcemap import apply_plan as apply
    from fusion_core.validate import run
    from fusion_core.validate.types import GateResult

    planned = []
    real_plan, real_validate = apply.plan_apply, run.validate

    def plan(*args):
        planned.append(args[2])  # the model file
        return real_plan(*args)

    def one_fails(analysis, **kwargs):  # the last cluster's numerics made to fail
        report = real_validate(analysis, **kwargs)
        failed = GateResult("cluster numerics", False, "failed for the test")
        results = (*report.results[:-1], dataclasses.replace(report.results[-1], gates=(failed,)))
        return dataclasses.replace(report, results=results)

    monkeypatch.setattr(apply, "plan_apply", plan)
    monkeypatch.setattr(run, "validate", one_fails)
    monkeypatch.setattr(model_zoo, "_library", lambda name: nn)
    row = model_zoo.run_one(model_zoo.ZooModel("two", "torch", lambda lib: Two(),
                                                         (model_zoo.InputSpec((4, 8)),)),
                            inductor=False, check=True, limit=300)
    assert row["clusters"] == "2" and row["kernels verified"] == "1/2"
    assert row["applied"] == "1 of 1"
    assert planned == [__file__, __file__]  # as it is, and as if the file were the user's


class Two(nn.Module):
    """Two clusters on two lines, each mapping exactly (the matmul splits them)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8, bias=False)

    def forward(self, x):
        y = torch.relu(x * 2)
        return torch.sigmoid(self.fc(y)) + 1


def test_an_error_in_the_source_edits_phase_is_its_cell(monkeypatch):
    from fusion_core.sourcemap import apply_plan as apply

    def broken(*args):
        raise RuntimeError("no plan")

    monkeypatch.setattr(apply, "plan_apply", broken)
    monkeypatch.setattr(model_zoo, "_library", lambda name: nn)
    row = model_zoo.run_one(model_zoo.ZooModel("small", "torch", lambda lib: Small()),
                            inductor=False, check=True, limit=300)
    assert row["applied"] == "error: RuntimeError: no plan"
    assert row["kernels verified"] == "1/1" and row["model numerics"] == "pass"


def test_without_validation_the_applied_column_is_a_dash(our_zoo, tmp_path):
    our_zoo(model_zoo.ZooModel("small", "torch", lambda lib: Small()))
    out = tmp_path / "zoo.md"
    assert model_zoo.main(["--out", str(out), "--no-inductor", "--no-validate"]) == 0
    text = out.read_text()
    assert table_rows(text)["small"]["applied"] == "-"
    assert text.splitlines()[2].startswith("| model |")  # h200_session.sh: a 4-line header


def test_the_log_keeps_each_missed_kernel_with_its_reason(monkeypatch, capsys):
    from types import SimpleNamespace

    from fusion_core.inductor.match import KernelMatch

    kernels = [KernelMatch("triton_poi_fused_add_relu_0", "exact", (0,), ("add", "relu"), ()),
               KernelMatch("triton_per_fused_mean_mul_1", "missed", (), ("mean", "mul"), (),
                           "split by our fan-out check: mul feeds two clusters")]
    monkeypatch.setattr(model_zoo, "_inductor_agreement", lambda a: SimpleNamespace(
        kernels=kernels, count=lambda s: sum(k.status == s for k in kernels)))
    columns = model_zoo._inductor_columns(None)
    assert columns["missed (reasons)"] == "1 (1 fan-out check)"
    assert ("missed triton_per_fused_mean_mul_1 (mean, mul): split by our fan-out check: "
            "mul feeds two clusters") in capsys.readouterr().err

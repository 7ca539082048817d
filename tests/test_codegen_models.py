"""ExampleNet and microgpt: every cluster's kernel matches its eager subgraph (interpreter),
and the generated files behave as promised (standalone imports, inference-only autograd)."""

import ast
import sys
from pathlib import Path

import pytest
import torch
from codegen_harness import DEVICE, check_model, run_kernel

from fusion_core.codegen import generate, generate_all, load_kernel, write_kernels
from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster
from fusion_core.pipeline import analyze

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

from example_net import ExampleNet  # noqa: E402
from microgpt import MicroGPT  # noqa: E402


def test_example_net_clusters_match_eager(tmp_path):
    torch.manual_seed(0)
    checked = check_model(ExampleNet(), (torch.randn(8, 1024),), tmp_path, n_clusters=3)
    assert [k.skeleton for k in checked.kernels] == ["elementwise", "elementwise", "reduction"]


def test_microgpt_clusters_match_eager(tmp_path):
    torch.manual_seed(0)
    checked = check_model(MicroGPT(), (torch.randint(0, 256, (1, 32)),), tmp_path)
    chains = [c.chain for c in checked.analysis.clusters]
    assert "mul → masked_fill → softmax → dropout" in chains
    assert any(ch.endswith("layer_norm") for ch in chains)
    # The causal mask is a (T, T) slice of a 256x256 buffer: read through its strides.
    attn = checked.kernels[chains.index("mul → masked_fill → softmax → dropout")]
    assert "in1_stride0" in attn.source


def test_microgpt_kernel_runs_at_a_smaller_batch(tmp_path):
    """Validation runs kernels at reduced shapes: same row width and mask, fewer rows."""
    torch.manual_seed(1)
    model = MicroGPT()
    analysis = analyze(model, torch.randint(0, 256, (2, 32)))
    small = torch.randint(0, 256, (1, 32))
    values = capture_values(analyze(model, small), small)
    for cluster in analysis.clusters:  # names match: same model, same trace
        args = cluster_inputs(analysis, cluster, values)
        got = run_kernel(generate(analysis, cluster), tmp_path / str(cluster.index), args)
        want = eager_cluster(analysis, cluster)(*args)
        assert got[0].shape[0] == 1 and len(got) == len(cluster.outputs)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)


def test_generated_files_import_only_torch_and_triton(tmp_path):
    analysis = analyze(ExampleNet(), torch.randn(4, 1024))
    for path in write_kernels(generate_all(analysis), tmp_path):
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        # os: the FUSION_ADVISOR_AUTOTUNE switch; triton.testing: timing the candidates;
        # hashlib, json, tempfile (the standard library): the tuning cache on disk; struct: a
        # float's double passed as its bits (`_double_bits`)
        assert imported == {"os", "torch", "triton", "triton.language", "triton.testing",
                            "hashlib", "json", "tempfile", "struct"}
        assert not any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cluster0.py", "cluster1.py", "cluster2.py"]  # no temp files left behind


def test_autograd_wrapper_runs_forward_and_refuses_backward(tmp_path):
    analysis = analyze(ExampleNet(), torch.randn(4, 1024))
    (path,) = write_kernels([generate(analysis, analysis.clusters[0])], tmp_path)
    module = load_kernel(path)
    x = torch.randn(4, 1024, device=DEVICE, requires_grad=True)
    y = module.Cluster0Function.apply(x)
    torch.testing.assert_close(y, torch.relu(x * 2.0) + 1.0)
    with pytest.raises(RuntimeError, match="inference only"):
        y.sum().backward()


def test_harness_catches_an_unwritten_output(tmp_path):
    """The poisoned output makes a kernel that skips its store fail the comparison."""
    analysis = analyze(ExampleNet(), torch.randn(4, 1024))
    kernel = generate(analysis, analysis.clusters[0])
    lines = kernel.source.splitlines()
    broken = "\n".join(line for line in lines if "tl.store(" not in line) + "\n"
    from dataclasses import replace

    (got,) = run_kernel(replace(kernel, source=broken), tmp_path, (torch.randn(4, 1024),))
    assert torch.isnan(got).all()


def test_generated_files_are_lint_clean(tmp_path):
    """No unused names or other pyflakes findings in what we emit (ruff's default rules)."""
    import shutil
    import subprocess

    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed")
    analysis = analyze(MicroGPT(), torch.randint(0, 256, (1, 16)))
    paths = write_kernels(generate_all(analysis), tmp_path)
    paths += write_kernels([generate(analysis, c, looped=True) for c in analysis.clusters],
                           tmp_path / "loop")
    proc = subprocess.run([ruff, "check", "--isolated", *map(str, paths)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_reading_its_input_dtype_matches_eager(tmp_path, dtype):
    """LlamaRMSNorm's `dtype = x.dtype; ...; x.to(dtype)`: the eager reference recomputes
    the dtype read (it was "neither a cluster input nor a trace-time constant")."""
    from dtype_rmsnorm import DtypeNormMLP

    torch.manual_seed(0)
    model = DtypeNormMLP().to(dtype)
    checked = check_model(model, (torch.randn(2, 8, 128, dtype=dtype),), tmp_path)
    norms = [c for c in checked.analysis.clusters if "mean" in c.ops]
    assert len(norms) == 2 and all("to" in c.ops for c in norms)


@pytest.mark.parametrize("module, cls, shape", [
    ("mixer_block", "MixerBlock", (1, 64, 128)),
    ("llama_block", "LlamaBlock", (1, 16, 128)),
    ("resnet_block", "BasicBlock", (1, 32, 8, 8)),
])
def test_every_shipped_example_verifies_under_the_interpreter(tmp_path, module, cls, shape):
    """The examples ExampleNet/microgpt tests above do not cover: every cluster's kernel
    against its eager subgraph (the before/after check of a code generator change)."""
    import importlib

    torch.manual_seed(0)
    model = getattr(importlib.import_module(module), cls)()
    checked = check_model(model, (torch.randn(shape),), tmp_path)
    assert checked.kernels

"""The names generated code carries come from one place and read back (`fusion_core/names.py`)."""

from fusion_core.names import cluster_of, function_class_name, kernel_name


def test_a_kernel_name_reads_back_as_its_cluster():
    assert kernel_name(7) == "cluster7" and cluster_of(kernel_name(7)) == 7
    assert function_class_name(7) == "Cluster7Function"


def test_other_names_are_no_cluster():
    assert [cluster_of(n) for n in ("cluster", "cluster7_kernel", "Cluster7", "x")] == [None] * 4


def test_generated_kernels_and_apply_calls_use_these_names():
    import torch.nn as nn

    from fusion_core.codegen import generate
    from fusion_core.pipeline import analyze

    class Net(nn.Module):
        def forward(self, x):
            return (x * 2).relu() + 1

    analysis = analyze(Net(), (4, 8))
    kernel = generate(analysis, analysis.clusters[0])
    assert kernel.name == kernel_name(0)
    assert f"def {kernel_name(0)}(" in kernel.source
    assert f"class {function_class_name(0)}(" in kernel.source

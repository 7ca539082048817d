"""Fusion baselines for the example models: a change that loses a fusion fails CI.

The `fusion_check` marker analyzes the model and compares the result with the
committed baseline in `fusion_baselines/`; the test bodies add assertions of
their own through the `fusion_advisor` fixture. After an intended change:

    pytest examples/test_examples_fusion.py --fusion-update-baselines=failing
"""

import pytest
from channel_softmax import ChannelSoftmax
from convnext_block import ConvNeXtBlock
from example_net import ExampleNet
from groupnorm_silu import ResBlock
from mbconv_se import MBConv
from microgpt import MicroGPT

# On a GPU these tests also judge kernel timings: run them with the GPU to themselves.
pytestmark = pytest.mark.timing


@pytest.mark.fusion_check(ExampleNet, (64, 1024), timing_inputs=[(16384, 1024)])
def test_example_net_fuses_its_three_regions(fusion_advisor):
    result = fusion_advisor.result
    fusion_advisor.assert_fused(result, ["mul", "relu", "add"])
    fusion_advisor.assert_fused(result, ["gelu", "sigmoid", "mul"])
    fusion_advisor.assert_fused(result, ["tanh", "mul", "softmax"])
    fusion_advisor.assert_no_rejection(result)
    fusion_advisor.assert_traffic_saved(result, fraction=0.6)
    assert result.kernels == 3


@pytest.mark.fusion_check(MicroGPT, (2, 16), dtype="int64", timing_inputs=[(64, 256)])
def test_microgpt_fuses_attention_softmax_and_norms(fusion_advisor):
    result = fusion_advisor.result
    fusion_advisor.assert_fused(result, ["mul", "masked_fill", "softmax"])
    fusion_advisor.assert_fused(result, ["add", "layer_norm"])
    fusion_advisor.assert_traffic_saved(result, fraction=0.3)


@pytest.mark.fusion_check(ConvNeXtBlock, (2, 32, 8, 8), timing_inputs=[(64, 32, 56, 56)])
def test_convnext_block_fuses_through_its_permutes(fusion_advisor):
    """The permutes are index maps inside the groups: LayerNorm reads the convolution's
    NCHW output directly, and the layer scale, permute back and residual are one kernel."""
    result = fusion_advisor.result
    fusion_advisor.assert_fused(result, ["permute", "layer_norm"])
    fusion_advisor.assert_fused(result, ["mul", "permute", "add"])
    fusion_advisor.assert_no_rejection(result)
    assert result.kernels == 2


@pytest.mark.fusion_check(ChannelSoftmax, (2, 16, 8, 8), timing_inputs=[(64, 16, 64, 64)])
def test_channel_softmax_fuses_over_dim_1(fusion_advisor):
    result = fusion_advisor.result
    fusion_advisor.assert_fused(result, ["div", "add", "softmax", "mul"])
    fusion_advisor.assert_no_rejection(result)
    assert result.kernels == 1


@pytest.mark.fusion_check(MBConv, (2, 16, 8, 8), timing_inputs=[(64, 16, 56, 56)])
def test_mbconv_fuses_the_squeeze_average_into_its_batch_norm_chain(fusion_advisor):
    result = fusion_advisor.result
    fusion_advisor.assert_fused(result, ["batch_norm", "silu", "adaptive_avg_pool2d"])
    fusion_advisor.assert_fused(result, ["sigmoid", "mul"])
    fusion_advisor.assert_fused(result, ["batch_norm", "add"])


@pytest.mark.fusion_check(ResBlock, (2, 32, 8, 8), timing_inputs=[(32, 32, 56, 56)])
def test_groupnorm_block_fuses_each_norm_with_its_silu(fusion_advisor):
    result = fusion_advisor.result
    fusion_advisor.assert_fused(result, ["group_norm", "silu"])
    assert result.kernels == 2

"""The fused conv epilogue on CUDA (libreyolo.kernels.conv_act): the Triton kernel's bits are
ATen's (bias add then SiLU) for every dtype and layout, and a yolo9 prediction graph captured
with it (GRAPH_BIAS_ACT) replays equal to the prepared model's eager forward, which does not
use it. Run on a GPU machine: ``python -m pytest tests/gpu/test_bias_act_gpu.py -q -s``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from libreyolo import kernels
from libreyolo.kernels.conv_act import bias_act_reference
from libreyolo.layers.conv import ConvBNAct, graph_bias_act

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("shape", [(1, 16, 120, 160), (2, 67, 13, 9), (8, 256, 20, 15)])
def test_triton_kernel_is_atens_bias_add_and_silu_bit_for_bit(dtype, layout, shape):
    pytest.importorskip("triton")
    g = torch.Generator(device="cuda").manual_seed(0)
    y = (torch.randn(shape, device="cuda", generator=g) * 6).to(dtype)
    if layout == "channels_last":
        y = y.contiguous(memory_format=torch.channels_last)
    b = torch.randn(shape[1], device="cuda", generator=g).to(dtype)
    ref = bias_act_reference(y.clone(), b)
    got = kernels.dispatch("bias_act", y.clone(), b)
    assert kernels.active()["bias_act"] == "triton"
    n_diff = int((ref != got).sum())
    print(f"{dtype} {layout} {shape}: {n_diff} of {ref.numel()} elements differ")
    assert torch.equal(ref, got)


def test_fused_conv_block_under_the_graph_switch_equals_aten():
    torch.manual_seed(0)
    m = ConvBNAct(32, 48, 3).cuda().eval().half()
    m.fuse()
    x = torch.randn(2, 32, 40, 56, device="cuda").half().contiguous(memory_format=torch.channels_last)
    m = m.to(memory_format=torch.channels_last)
    with torch.inference_mode():
        aten = m(x)
        with graph_bias_act():
            fused = m(x)
    assert torch.equal(aten, fused)
    assert torch.equal(aten, F.silu(F.conv2d(x, m.conv.weight, m.conv.bias, padding=1)))


@pytest.mark.parametrize("half", [False, True])
def test_yolo9_graph_with_the_fused_epilogue_replays_the_eager_forward(half):
    from libreyolo.graphs.parity import calibrate_norm_stats, check_prepared_parity
    from libreyolo.model import Model
    from libreyolo.models.yolo9.family import YOLO9

    assert YOLO9.GRAPH_BIAS_ACT
    torch.manual_seed(0)
    model = Model(YOLO9(size="t", nc=80))
    model.to("cuda")
    calibrate_norm_stats(model.net, seed=0, imgsz=320)
    row = check_prepared_parity(model, shape=(1, 3, 320, 416), dtype=torch.float16 if half else None)
    assert row["result"] == "pass", row
    assert row.get("bias_act") is True, row  # the replay really had the fused epilogue
    assert row["decode"]["result"] == "pass", row["decode"]

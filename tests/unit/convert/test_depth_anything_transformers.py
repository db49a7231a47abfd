"""Depth Anything V2 against transformers' ``DepthAnythingForDepthEstimation`` (issue 23): the
reference is built from a local config (no download) with the published small / base layout
(DINOv2 encoder, blocks 3/6/9/12 tapped, the DPT neck widths), seeded, its head bias nudged so
that the final ReLU passes most pixels, converted in memory and run in eval mode on the same
input; the depth maps must agree within 1e-5 relative (fp32). The input is 70 x 84 px (5 x 6
patches), so the position embedding is resampled on both sides."""

from __future__ import annotations

import pytest
import torch
from _convert_helpers import assert_rel_close

transformers = pytest.importorskip("transformers")

from libreyolo.convert import ForeignWeights, convert_foreign  # noqa: E402
from libreyolo.errors import CheckpointError  # noqa: E402
from libreyolo.layers.classify import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from libreyolo.models.depth_anything.convert import convert_state_dict  # noqa: E402
from libreyolo.models.depth_anything.family import DepthAnythingV2  # noqa: E402

LAYOUT = {"s": (384, 6, [48, 96, 192, 384], 64), "b": (768, 12, [96, 192, 384, 768], 128)}


def _reference(size: str, *, depth: int = 12):
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config

    width, heads, neck, fusion = LAYOUT[size]
    torch.manual_seed(0)
    backbone = Dinov2Config(image_size=518, patch_size=14, hidden_size=width, num_attention_heads=heads,
                            num_hidden_layers=depth, out_indices=[3, 6, 9, 12], reshape_hidden_states=False,
                            apply_layernorm=True)
    cfg = DepthAnythingConfig(backbone_config=backbone, reassemble_hidden_size=width, neck_hidden_sizes=neck,
                              fusion_hidden_size=fusion, depth_estimation_type="relative")
    ref = DepthAnythingForDepthEstimation(cfg).eval()
    with torch.no_grad():
        ref.head.conv3.bias.fill_(0.5)  # most pixels above zero: the ReLU must not hide a difference
    return ref


def _forward_both(net: torch.nn.Module, ref, hw: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(2, 3, *hw, generator=torch.Generator().manual_seed(5))
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        want = ref(pixel_values=(x - mean) / std).predicted_depth
        got = net.eval()(x)[:, 0]
    return got, want


def test_small_depth_equals_transformers() -> None:
    ref = _reference("s")
    model = convert_foreign(ForeignWeights(source="transformers", arch="depth_anything",
                                           state_dict=ref.state_dict(), path="<memory>"))
    assert (model.FAMILY, model.size, model.nc, model.task) == ("depth_anything", "s", 1, "depth")
    got, want = _forward_both(model.net, ref, (70, 84))
    assert got.shape == (2, 70, 84) and float((want > 0).float().mean()) > 0.5
    assert_rel_close(got, want, what="depth")
    # the parameter count: the reference's minus the residual unit its first fusion layer never runs
    # and the mask token (masked pretraining only)
    unused = sum(v.numel() for k, v in ref.state_dict().items()
                 if "fusion_stage.layers.0.residual_layer1" in k or k.endswith("mask_token"))
    ours = sum(p.numel() for p in model.net.parameters())
    assert ours == sum(p.numel() for p in ref.parameters()) - unused
    assert abs(ours / 24.8e6 - 1) < 0.01  # the published 24.8 M of Depth-Anything-V2-Small


def test_base_layout_converts_and_matches() -> None:
    """The base layout (width 768, 12 heads, the base neck widths): the converter's shapes and the
    forward agree, at a smaller input (3 x 4 patches)."""
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config

    torch.manual_seed(1)
    backbone = Dinov2Config(image_size=518, hidden_size=768, num_attention_heads=12, num_hidden_layers=12,
                            out_indices=[3, 6, 9, 12], reshape_hidden_states=False)
    cfg = DepthAnythingConfig(backbone_config=backbone, reassemble_hidden_size=768, neck_hidden_sizes=[96, 192, 384, 768],
                              fusion_hidden_size=128)
    ref = DepthAnythingForDepthEstimation(cfg).eval()
    with torch.no_grad():
        ref.head.conv3.bias.fill_(0.5)
    model = DepthAnythingV2(size="b")
    model.net.load_state_dict(convert_state_dict(ref.state_dict(), model.net.state_dict()))
    got, want = _forward_both(model.net, ref, (42, 56))
    assert_rel_close(got, want, what="depth")


def test_unknown_key_and_width_are_named() -> None:
    own = DepthAnythingV2(size="s").net.state_dict()
    with pytest.raises(CheckpointError, match="backbone.register_tokens"):
        convert_state_dict({"backbone.register_tokens": torch.zeros(1, 4, 384)}, own)
    fw = ForeignWeights(source="transformers", arch="depth_anything", path="<memory>",
                        state_dict={"backbone.embeddings.cls_token": torch.zeros(1, 1, 1024)})
    with pytest.raises(CheckpointError, match="width 1024"):
        convert_foreign(fw)

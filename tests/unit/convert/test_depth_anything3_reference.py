"""Depth Anything 3 against its reference, the ``depth_anything_3`` package's ``DepthAnything3Net``
(issue 25). The package does not import with the project's installed dependencies (it needs
``addict`` and ``omegaconf``), so it skips in the main environment; CI's references step (``.ci/run``) runs it, with the package and those two on the path
(``pip install --no-deps --target DIR depth-anything-3 addict omegaconf antlr4-python3-runtime``,
then ``PYTHONPATH=DIR``) it runs. A reduced configuration (width 64, 6 blocks, small neck) of both
head kinds is built with a fixed seed, every parameter perturbed, converted in memory and run in
eval mode on one 70 x 84 px image (5 x 6 patches: the position embedding is resampled, the RoPE
grid is not square): depth, confidence and sky (after the sky step) agree within 1e-5 relative; so
does the reference's own whole ``da3-small`` configuration."""

from __future__ import annotations

import pytest
import torch
from _convert_helpers import assert_rel_close

pytest.importorskip("addict")
pytest.importorskip("omegaconf")
pytest.importorskip("depth_anything_3")

from depth_anything_3.model.da3 import DepthAnything3Net  # noqa: E402
from depth_anything_3.model.dinov2.dinov2 import DinoV2  # noqa: E402
from depth_anything_3.model.dinov2.vision_transformer import DinoVisionTransformer  # noqa: E402
from depth_anything_3.model.dpt import DPT  # noqa: E402
from depth_anything_3.model.dualdpt import DualDPT  # noqa: E402

from libreyolo.layers.classify import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from libreyolo.models._vit.net import ViTSpec  # noqa: E402
from libreyolo.models.depth_anything3.convert import convert_state_dict  # noqa: E402
from libreyolo.models.depth_anything3.nn import DA3Spec, DepthAnything3  # noqa: E402
from libreyolo.models.depth_anything3.postprocess import sky_step  # noqa: E402

NECK, FUSION = [8, 16, 32, 32], 16


def _reference(*, dual: bool) -> DepthAnything3Net:
    torch.manual_seed(0)
    alt = 2 if dual else -1
    backbone = DinoV2.__new__(DinoV2)
    torch.nn.Module.__init__(backbone)
    backbone.out_layers = [2, 3, 4, 5]
    backbone.pretrained = DinoVisionTransformer(img_size=518, patch_size=14, embed_dim=64, depth=6, num_heads=4,
                                                ffn_layer="mlp", alt_start=alt, qknorm_start=alt, rope_start=alt,
                                                cat_token=dual)
    if dual:
        head = DualDPT(dim_in=128, output_dim=2, features=FUSION, out_channels=NECK)
    else:
        head = DPT(dim_in=64, output_dim=1, features=FUSION, out_channels=NECK)
    ref = DepthAnything3Net(backbone, head).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():  # zeros / ones of a fresh init would hide a swapped tensor
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
        if not dual:  # about half the pixels sky, so that the sky step has work
            ref.head.scratch.sky_output_conv2[2].bias.fill_(0.3)
    return ref


def _ours(*, dual: bool) -> DepthAnything3:
    vit = ViTSpec(dim=64, depth=6, heads=4, patch=14, img_size=518, layer_scale=1.0, drop_path=0.0)
    spec = DA3Spec(vit, taps=(2, 3, 4, 5), neck=tuple(NECK), fusion=FUSION, alt=2 if dual else -1,
                   cat_token=dual, dual=dual)
    return DepthAnything3(spec).eval()


def _run(dual: bool) -> tuple[dict, tuple[torch.Tensor, torch.Tensor]]:
    ref, net = _reference(dual=dual), _ours(dual=dual)
    net.load_state_dict(convert_state_dict(ref.state_dict(), net.state_dict()))
    x = torch.rand(1, 3, 70, 84, generator=torch.Generator().manual_seed(5))
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        want = ref(((x - mean) / std)[:, None])
        got = net(x)
    return want, got


def test_any_view_head_equals_reference() -> None:
    want, (depth, conf) = _run(dual=True)
    assert_rel_close(depth[:, 0], want["depth"][:, 0], what="depth")
    assert_rel_close(conf[:, 0], want["depth_conf"][:, 0], what="confidence")


def test_mono_head_and_sky_step_equal_reference() -> None:
    want, (depth, sky) = _run(dual=False)
    assert_rel_close(sky[:, 0], want["sky"][:, 0], what="sky")
    frac = float((sky < 0.3).float().mean())
    assert 0.05 < frac < 0.95, frac  # the sky step changed pixels
    assert_rel_close(sky_step(depth, sky)[:, 0], want["depth"][:, 0], what="depth after the sky step")


def test_published_small_configuration_converts_whole_and_matches() -> None:
    """The reference's own ``da3-small`` configuration (with its camera encoder / decoder and ray
    branch, which the converter drops) at 98 x 126 px: the same depth and confidence."""
    from pathlib import Path

    import depth_anything_3
    from depth_anything_3.cfg import create_object, load_config

    from libreyolo.models.depth_anything3.nn import build_depth_anything3

    cfg = Path(next(iter(depth_anything_3.__path__))) / "configs" / "da3-small.yaml"
    torch.manual_seed(0)
    ref = create_object(load_config(str(cfg))).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    net = build_depth_anything3(size="s").eval()
    net.load_state_dict(convert_state_dict({"model." + k: v for k, v in ref.state_dict().items()}, net.state_dict()))
    x = torch.rand(1, 3, 98, 126, generator=torch.Generator().manual_seed(5))
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        want = ref(((x - mean) / std)[:, None])
        depth, conf = net(x)
    assert_rel_close(depth[:, 0], want["depth"][:, 0], what="depth")
    assert_rel_close(conf[:, 0], want["depth_conf"][:, 0], what="confidence")

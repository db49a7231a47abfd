"""LW-DETR and RF-DETR against Hugging Face ``transformers`` (``LwDetrForObjectDetection``,
``RfDetrForObjectDetection``): both built offline from the same reduced configuration (random init,
fixed seed, every weight and BatchNorm statistic perturbed so a swapped tensor cannot hide), ours
converted from theirs, both in eval mode in fp32 on the CPU; logits and boxes agree within 1e-5
relative, at the position embedding's own grid and at a resampled one (also LW-DETR large /
xlarge's P3 + P5 projector). The published configurations of the larger sizes are built on the
meta device and checked key for key. The reference takes ImageNet-normalised pixels, ours [0, 1]
RGB (the normalisation is inside our backbone)."""

from __future__ import annotations

import pytest
import torch
from _convert_helpers import assert_rel_close

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.models.lw_detr")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.convert import ForeignWeights, convert_foreign  # noqa: E402
from libreyolo.errors import CheckpointError  # noqa: E402
from libreyolo.layers.classify import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from libreyolo.models._detr.lwdetr import LWDecoderConfig  # noqa: E402
from libreyolo.models._detr.lwdetr_convert import convert_state_dict  # noqa: E402
from libreyolo.models.lw_detr.nn import LWDETRConfig, LWDETRNet  # noqa: E402
from libreyolo.models.rf_detr.nn import RFDETRConfig, RFDETRNet  # noqa: E402


@pytest.fixture(autouse=True)
def _portable_attention(monkeypatch: pytest.MonkeyPatch):
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    registry.clear_cache()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
    registry.clear_cache()


DEC = dict(d_model=64, decoder_layers=2, num_queries=10, group_detr=2, decoder_ffn_dim=64,
           decoder_cross_attention_heads=4, decoder_self_attention_heads=4, decoder_n_points=2, num_labels=3)
OUR_DEC = LWDecoderConfig(hidden=64, sa_heads=4, ca_heads=4, dec_layers=2, points=2, ffn=64, num_queries=10, groups=2)


def _perturb(ref):
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, buf in ref.named_buffers():
            if name.endswith("running_var"):
                buf.copy_(torch.rand(buf.shape, generator=g) * 0.5 + 0.75)
            elif name.endswith("running_mean"):
                buf.copy_(torch.randn(buf.shape, generator=g) * 0.1)
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    return ref.eval()


def _lw_reference():
    from transformers import LwDetrConfig, LwDetrForObjectDetection

    torch.manual_seed(0)
    bb = dict(model_type="lw_detr_vit", hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
              window_block_indices=[0, 2], out_indices=[1, 2, 3], num_windows=4, image_size=64, pretrain_image_size=64)
    return _perturb(LwDetrForObjectDetection(LwDetrConfig(backbone_config=bb, projector_scale_factors=[1.0], **DEC)))


def _rf_reference():
    from transformers import RfDetrConfig, RfDetrForObjectDetection

    torch.manual_seed(0)
    bb = dict(model_type="rf_detr_dinov2", hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
              window_block_indexes=[0], out_features=["stage1", "stage2", "stage3"], num_windows=2, image_size=64,
              patch_size=16, num_register_tokens=0)
    return _perturb(RfDetrForObjectDetection(RfDetrConfig(backbone_config=bb, **DEC)))


def _rf14_reference():
    """The base layout at a reduced width: 14 px patches, a 4 x 4 position grid (56 px), 2 x 2 windows."""
    from transformers import RfDetrConfig, RfDetrForObjectDetection

    torch.manual_seed(0)
    bb = dict(model_type="rf_detr_dinov2", hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
              window_block_indexes=[0], out_features=["stage1", "stage2", "stage3"], num_windows=2, image_size=56,
              patch_size=14, num_register_tokens=0)
    return _perturb(RfDetrForObjectDetection(RfDetrConfig(backbone_config=bb, **DEC)))


def _ours_lw() -> LWDETRNet:
    return LWDETRNet(cfg=LWDETRConfig(dim=48, depth=3, heads=4, pos_grid=4, windows=2, window_blocks=(0, 2),
                                      out_blocks=(0, 1, 2), decoder=OUR_DEC), nc=3)


def _ours_rf() -> RFDETRNet:
    return RFDETRNet(cfg=RFDETRConfig(dim=48, depth=3, heads=4, pos_grid=4, windows=2, out_stages=(1, 2, 3),
                                      decoder=OUR_DEC), nc=3)


def test_fourteen_pixel_patches_give_the_same_outputs() -> None:
    ref = _rf14_reference()
    ours = RFDETRNet(cfg=RFDETRConfig(dim=48, depth=3, heads=4, patch=14, pos_grid=4, windows=2, out_stages=(1, 2, 3),
                                      decoder=OUR_DEC), nc=3).eval()
    ours.load_state_dict(convert_state_dict(ref.state_dict(), ours.state_dict()), strict=True)
    torch.manual_seed(3)
    for side in (56, 112):
        _compare(ours, ref, torch.rand(2, 3, side, side))


def _outputs(ref, x):
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    h, w = x.shape[-2:]
    with torch.no_grad():
        out = ref(pixel_values=(x - mean) / std)
    cx, cy, bw, bh = out.pred_boxes.unbind(-1)
    return out.logits, torch.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h], -1)


def _compare(ours, ref, x) -> None:
    with torch.no_grad():
        lo, bo = ours(x)
    lr, br = _outputs(ref, x)
    assert_rel_close(lo, lr, what="logits")
    assert_rel_close(bo, br, what="boxes")
    assert lr.std() > 1e-3 and br.std() > 1e-3


@pytest.mark.parametrize("family", ["lw_detr", "rf_detr"])
@pytest.mark.parametrize("side", [64, 128], ids=["native_grid", "resampled_grid"])
def test_converted_weights_give_the_same_outputs(family: str, side: int) -> None:
    ref = _lw_reference() if family == "lw_detr" else _rf_reference()
    ours = (_ours_lw() if family == "lw_detr" else _ours_rf()).eval()
    ours.load_state_dict(convert_state_dict(ref.state_dict(), ours.state_dict()), strict=True)
    torch.manual_seed(3)
    _compare(ours, ref, torch.rand(2, 3, side, side))


def test_checkpoints_load_through_the_dispatcher_and_from_a_hub_folder(tmp_path) -> None:
    """A size-shaped reference is recognised (LW-DETR tiny: 6 ViT blocks; RF-DETR nano: grid 24, 2
    decoder layers) and ``LibreYOLO(folder)`` loads a ``save_pretrained`` folder."""
    from transformers import RfDetrConfig, RfDetrForObjectDetection

    torch.manual_seed(0)
    bb = dict(model_type="rf_detr_dinov2", hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
              window_block_indexes=[0, 1, 2, 4, 5, 7, 8, 10, 11], out_features=["stage3", "stage6", "stage9", "stage12"],
              num_windows=2, image_size=384, patch_size=16, num_register_tokens=0)
    ref = _perturb(RfDetrForObjectDetection(RfDetrConfig(backbone_config=bb, decoder_layers=2, decoder_n_points=2,
                                                         num_labels=4)))
    model = convert_foreign(ForeignWeights(source="transformers", arch="rf_detr", state_dict=ref.state_dict(),
                                           path="mem"))
    assert (model.FAMILY, model.size, model.nc) == ("rf_detr", "nano", 4)
    x = torch.rand(1, 3, 320, 320)  # 400 tokens: the reference needs at least its 300 queries
    _compare(model.net.eval(), ref, x)
    folder = tmp_path / "rf-detr"
    ref.save_pretrained(str(folder))
    loaded = LibreYOLO(str(folder))
    assert loaded.family.FAMILY == "rf_detr" and loaded.nc == 4
    _compare(loaded.net.eval(), ref, x)


def test_lw_detr_tiny_loads_from_a_hub_folder(tmp_path) -> None:
    from transformers import LwDetrConfig, LwDetrForObjectDetection

    torch.manual_seed(0)
    bb = dict(model_type="lw_detr_vit", hidden_size=192, num_hidden_layers=6, num_attention_heads=12,
              window_block_indices=[0, 2, 4], out_indices=[2, 4, 6], num_windows=16, image_size=1024,
              pretrain_image_size=224)
    ref = _perturb(LwDetrForObjectDetection(LwDetrConfig(backbone_config=bb, projector_scale_factors=[1.0],
                                                         decoder_n_points=2, num_queries=100, num_labels=4)))
    folder = tmp_path / "lw-detr"
    ref.save_pretrained(str(folder))
    loaded = LibreYOLO(str(folder))
    assert (loaded.family.FAMILY, loaded.size, loaded.nc) == ("lw_detr", "tiny", 4)
    _compare(loaded.net.eval(), ref, torch.rand(1, 3, 192, 192))  # 144 tokens for the 100 queries


def test_other_architectures_and_sizes_are_refused() -> None:
    from libreyolo.models.lw_detr.convert import match as lw_match
    from libreyolo.models.rf_detr.convert import match as rf_match

    assert lw_match(ForeignWeights(source="transformers", arch="rt_detr", state_dict={}, path="x")) is None
    assert rf_match(ForeignWeights(source="transformers", arch="lw_detr", state_dict={}, path="x")) is None
    sd = _lw_reference().state_dict()
    with pytest.raises(CheckpointError, match="matches none"):
        lw_match(ForeignWeights(source="transformers", arch="lw_detr", state_dict=sd, path="x"))
    with pytest.raises(CheckpointError, match="has no place|reference shape"):
        convert_state_dict(sd, _ours_rf().state_dict())


def _lw_two_level_reference(width: int):
    """LW-DETR large / xlarge's projector at a reduced size: P3 + P5 (``projector_scale_factors``
    2.0, 0.5); a width over 512 takes the reference's 1x1-conv-first P3 resampling (xlarge)."""
    from transformers import LwDetrConfig, LwDetrForObjectDetection

    torch.manual_seed(0)
    bb = dict(model_type="lw_detr_vit", hidden_size=width, num_hidden_layers=2, num_attention_heads=4,
              window_block_indices=[0], out_indices=[1, 2], num_windows=4, image_size=64, pretrain_image_size=64)
    dec = dict(DEC, decoder_n_points=3)
    return _perturb(LwDetrForObjectDetection(LwDetrConfig(backbone_config=bb, projector_scale_factors=[2.0, 0.5],
                                                          **dec)))


def _ours_two_level(width: int) -> LWDETRNet:
    dec = LWDecoderConfig(hidden=64, sa_heads=4, ca_heads=4, dec_layers=2, points=3, ffn=64, num_queries=10, groups=2,
                          num_levels=2, scales=(2.0, 0.5))
    return LWDETRNet(cfg=LWDETRConfig(dim=width, depth=2, heads=4, pos_grid=4, windows=2, window_blocks=(0,),
                                      out_blocks=(0, 1), decoder=dec), nc=3).eval()


@pytest.mark.parametrize("width", [48, 528], ids=["large_layout", "xlarge_layout"])
def test_two_level_projector_gives_the_same_outputs(width: int) -> None:
    ref = _lw_two_level_reference(width)
    ours = _ours_two_level(width)
    ours.load_state_dict(convert_state_dict(ref.state_dict(), ours.state_dict()), strict=True)
    assert any(k.startswith("encoder.levels.1.sampling.") for k in ours.state_dict())
    torch.manual_seed(3)
    for side in (64, 128):
        _compare(ours, ref, torch.rand(2, 3, side, side))


def test_two_level_save_pretrained_names_convert(tmp_path) -> None:
    """The names ``save_pretrained`` writes for the two-level layout (the file, not the module) map
    onto ours and give the same outputs."""
    from safetensors.torch import load_file

    ref = _lw_two_level_reference(48)
    ref.save_pretrained(str(tmp_path))
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert any(".attention.attention.query." in k for k in saved)  # the file's own names, not the module's
    ours = _ours_two_level(48)
    ours.load_state_dict(convert_state_dict(saved, ours.state_dict()), strict=True)
    torch.manual_seed(3)
    _compare(ours, ref, torch.rand(2, 3, 64, 64))


def _full_reference(family: str, size: str):
    """The published configuration (LW-DETR: transformers' conversion script / the reference's
    scripts; RF-DETR large: rfdetr's ``RFDETRLargeConfig``), built on the meta device."""
    from transformers import (
        LwDetrConfig,
        LwDetrForObjectDetection,
        RfDetrConfig,
        RfDetrForObjectDetection,
    )

    if family == "rf_detr":
        bb = dict(model_type="rf_detr_dinov2", hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                  window_block_indexes=[0, 1, 2, 4, 5, 7, 8, 10, 11],
                  out_features=["stage3", "stage6", "stage9", "stage12"], num_windows=2, image_size=704, patch_size=16,
                  num_register_tokens=0)
        return RfDetrForObjectDetection(RfDetrConfig(backbone_config=bb, decoder_layers=4, decoder_n_points=2,
                                                     num_labels=91))
    width = {"medium": 384, "large": 384, "xlarge": 768}[size]
    bb = dict(model_type="lw_detr_vit", hidden_size=width, num_hidden_layers=10, num_attention_heads=12,
              window_block_indices=[0, 1, 3, 6, 7, 9], out_indices=[3, 5, 6, 10], num_windows=16, image_size=1024,
              pretrain_image_size=224)
    dec = (dict(projector_scale_factors=[1.0], d_model=256, decoder_self_attention_heads=8,
                decoder_cross_attention_heads=16, decoder_n_points=2) if size == "medium" else
           dict(projector_scale_factors=[2.0, 0.5], d_model=384, decoder_self_attention_heads=12,
                decoder_cross_attention_heads=24, decoder_n_points=4))
    return LwDetrForObjectDetection(LwDetrConfig(backbone_config=bb, num_queries=300, num_labels=91, **dec))


@pytest.mark.parametrize(("family", "size"), [("lw_detr", "medium"), ("lw_detr", "large"), ("lw_detr", "xlarge"),
                                              ("rf_detr", "large")])
def test_published_configurations_are_recognised_and_convert_key_for_key(family: str, size: str) -> None:
    """At full size (meta device: shapes only): the dispatcher's ``match`` names the size and every
    reference tensor lands on one of ours of the same shape, none of ours missing."""
    from libreyolo.registry import get_family

    with torch.device("meta"):
        ref = _full_reference(family, size)
        ours = get_family(family).build_net(size=size, nc=91, task="detect")
    sd = ref.state_dict()
    match = __import__(f"libreyolo.models.{family}.convert", fromlist=["match"]).match
    assert match(ForeignWeights(source="transformers", arch=family, state_dict=sd, path="x")) == (size, 91)
    out = convert_state_dict(sd, ours.state_dict())
    assert sorted(out) == sorted(ours.state_dict())

"""DEIMv2 against Hugging Face ``transformers`` (issue 24): ``Deimv2ForObjectDetection`` built from
configs matching our atto, femto and pico (three-stage HGNetv2, lite encoder, RMSNorm / SwiGLU
decoder, shared box head, no gate) and n (HGNetv2-B0, hybrid encoder with sum fusion, RMSNorm gate),
random init with a fixed seed, random BatchNorm statistics and random values for the
zero-initialised head layers; converted, both run in eval mode on the same image;
logits and boxes compared per query after pairing the queries up (see test_dfine_transformers.py).

transformers builds the LQE, query-position and box-head MLPs with ReLU where the reference
configs say SiLU (``activation`` / ``mlp_act``); the comparison therefore runs our network with
transformers' activations (``lqe_act`` / ``mlp_act`` / ``query_pos_act`` = ``"relu"``), our
defaults being the reference's."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.models.deimv2")

from libreyolo.convert import ForeignWeights, convert_foreign  # noqa: E402
from libreyolo.models._detr.deimv2_net import Deimv2Detector  # noqa: E402

H, W = 96, 128
TOKENS = (H // 16) * (W // 16) + (H // 32) * (W // 32)  # every token is a query


@pytest.fixture(autouse=True)
def _portable_attention(monkeypatch: pytest.MonkeyPatch):
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    registry.clear_cache()
    yield
    registry.clear_cache()


def _config_n():
    from transformers import Deimv2Config, HGNetV2Config

    backbone = HGNetV2Config(
        stem_channels=[3, 16, 16], stage_in_channels=[16, 64, 256, 512], stage_mid_channels=[16, 32, 64, 128],
        stage_out_channels=[64, 256, 512, 1024], stage_num_blocks=[1, 1, 2, 1],
        stage_downsample=[False, True, True, True], stage_light_block=[False, False, True, True],
        stage_kernel_size=[3, 3, 5, 5], stage_numb_of_layers=[3, 3, 3, 3], use_learnable_affine_block=True,
        out_features=["stage3", "stage4"], hidden_sizes=[64, 256, 512, 1024])
    return Deimv2Config(num_labels=80, backbone_config=backbone, encoder_type="hybrid", encoder_in_channels=[512, 1024],
                        feat_strides=[16, 32], encoder_hidden_dim=128, encode_proj_layers=[1], encoder_ffn_dim=512,
                        hidden_expansion=0.34, depth_mult=0.5, d_model=128, decoder_in_channels=[128, 128],
                        decoder_ffn_dim=512, num_feature_levels=2, decoder_n_points=[6, 6], decoder_layers=3,
                        num_queries=TOKENS, use_gateway=True, share_bbox_head=False, encoder_has_trailing_conv=True)


def _config(size: str):
    from transformers import Deimv2Config, HGNetV2Config

    if size == "n":
        return _config_n()

    c3, k3 = (256, 3) if size == "atto" else (512, 5)
    hidden, ffn = {"atto": (64, 160), "femto": (96, 256), "pico": (112, 320)}[size]
    backbone = HGNetV2Config(
        stem_channels=[3, 16, 16], stage_in_channels=[16, 64, 256], stage_mid_channels=[16, 32, 64],
        stage_out_channels=[64, 256, c3], stage_num_blocks=[1, 1, 2 if size == "pico" else 1], stage_downsample=[False, True, True],
        stage_light_block=[False, False, True], stage_kernel_size=[3, 3, k3], stage_numb_of_layers=[3, 3, 3],
        use_learnable_affine_block=True, out_features=["stage3"], hidden_sizes=[64, 256, c3], depths=[1, 1, 2 if size == "pico" else 1])
    return Deimv2Config(num_labels=80, backbone_config=backbone, encoder_type="lite", encoder_in_channels=[c3],
                        feat_strides=[16], encoder_hidden_dim=hidden, hidden_expansion=0.34, depth_mult=0.5,
                        d_model=hidden, decoder_in_channels=[hidden, hidden], decoder_ffn_dim=ffn,
                        num_feature_levels=2, decoder_n_points=[4, 2], decoder_layers=3, num_queries=TOKENS,
                        use_gateway=False, share_bbox_head=True, encoder_has_trailing_conv=True)


def _reference(size: str):
    from transformers import Deimv2ForObjectDetection

    torch.manual_seed(0)
    ref = Deimv2ForObjectDetection(_config(size)).eval()
    randomize_norms(ref)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # the box / LQE heads start at zero: give them values, or boxes compare trivially
        for p in ref.parameters():
            if not p.abs().sum():
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return ref


def _fw(ref) -> ForeignWeights:
    return ForeignWeights(source="transformers", arch="deimv2", state_dict=ref.state_dict(), path="<memory>")


@pytest.mark.parametrize("size", ["atto", "femto", "pico", "n"])
def test_outputs_equal_transformers(size: str) -> None:
    ref = _reference(size)
    model = convert_foreign(_fw(ref))
    assert (model.FAMILY, model.size, model.nc) == ("deimv2", size, 80)
    assert sum(p.numel() for p in model.net.parameters()) > sum(p.numel() for p in ref.parameters())  # frozen BN there
    cfg = dataclasses.replace(model.net.cfg, num_queries=TOKENS, lqe_act="relu", mlp_act="relu", query_pos_act="relu")
    net = Deimv2Detector(cfg=cfg, nc=80)
    net.load_state_dict(model.net.state_dict())
    x = torch.rand(1, 3, H, W, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = ref(pixel_values=x)
        lo, bo = net.eval()(x)
    cx, cy, bw, bh = out.pred_boxes.unbind(-1)
    br = torch.stack([(cx - bw / 2) * W, (cy - bh / 2) * H, (cx + bw / 2) * W, (cy + bh / 2) * H], -1)
    assert lo.shape == out.logits.shape and bo.shape == br.shape
    fo, fr = torch.cat([lo, bo / W], -1)[0], torch.cat([out.logits, br / W], -1)[0]
    j = torch.cdist(fo, fr).argmin(1)
    assert len(set(j.tolist())) == fo.shape[0], "queries do not pair up one to one"
    assert_rel_close(lo[0], out.logits[0, j], what="logits")
    assert_rel_close(bo[0], br[0, j], what="boxes")


def test_save_pretrained_folder_loads(tmp_path) -> None:
    from libreyolo import LibreYOLO

    ref = _reference("atto")
    ref.save_pretrained(str(tmp_path))
    model = LibreYOLO(str(tmp_path))
    assert (model.FAMILY, model.size) == ("deimv2", "atto")
    own = model.net.state_dict()
    direct = convert_foreign(_fw(ref)).net.state_dict()
    assert all(torch.equal(own[k], direct[k]) for k in own)

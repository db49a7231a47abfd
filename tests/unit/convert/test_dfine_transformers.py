"""D-FINE against Hugging Face ``transformers`` (issue 18): ``DFineForObjectDetection`` built from
configs matching our n and s (HGNetv2-B0), random init with a fixed seed and random BatchNorm
statistics, converted, both run in eval mode on the same image; logits and boxes compared per query
after pairing the queries up (see test_rtdetr_transformers.py for why the order may differ)."""

from __future__ import annotations

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

transformers = pytest.importorskip("transformers")

from libreyolo.convert import ForeignWeights, convert_foreign  # noqa: E402

H, W = 96, 128


@pytest.fixture(autouse=True)
def _portable_attention(monkeypatch: pytest.MonkeyPatch):
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")  # no Triton-interpreter deformable attention on CPU
    registry.clear_cache()
    yield
    registry.clear_cache()


def _config(size: str):
    from transformers import DFineConfig, HGNetV2Config

    levels = 3 if size == "s" else 2
    tokens = sum((H // s) * (W // s) for s in (8, 16, 32)[3 - levels:])  # every token is a query
    backbone = HGNetV2Config(
        stem_channels=[3, 16, 16], stage_in_channels=[16, 64, 256, 512], stage_mid_channels=[16, 32, 64, 128],
        stage_out_channels=[64, 256, 512, 1024], stage_num_blocks=[1, 1, 2, 1],
        stage_downsample=[False, True, True, True], stage_light_block=[False, False, True, True],
        stage_kernel_size=[3, 3, 5, 5], stage_numb_of_layers=[3, 3, 3, 3], use_learnable_affine_block=True,
        out_features=["stage2", "stage3", "stage4"][3 - levels:], hidden_sizes=[64, 256, 512, 1024])
    if size == "s":
        return DFineConfig(num_labels=80, backbone_config=backbone, encoder_in_channels=[256, 512, 1024],
                           hidden_expansion=0.5, depth_mult=0.34, decoder_layers=3, decoder_n_points=[3, 6, 3],
                           num_queries=tokens)
    return DFineConfig(num_labels=80, backbone_config=backbone, encoder_in_channels=[512, 1024],
                       feat_strides=[16, 32], encoder_hidden_dim=128, encode_proj_layers=[1], encoder_ffn_dim=512,
                       hidden_expansion=0.34, depth_mult=0.5, d_model=128, decoder_in_channels=[128, 128],
                       decoder_ffn_dim=512, num_feature_levels=2, decoder_n_points=[6, 6], decoder_layers=3,
                       num_queries=tokens)


@pytest.mark.parametrize("size", ["n", "s"])
def test_outputs_equal_transformers(size: str) -> None:
    from transformers import DFineForObjectDetection

    torch.manual_seed(0)
    ref = DFineForObjectDetection(_config(size)).eval()
    randomize_norms(ref)
    model = convert_foreign(ForeignWeights(source="transformers", arch="d_fine", state_dict=ref.state_dict(),
                                           path="<memory>"))
    assert (model.FAMILY, model.size, model.nc) == ("dfine", size, 80)
    x = torch.rand(1, 3, H, W, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = ref(pixel_values=x)
        lo, bo = model.net.eval()(x)
    cx, cy, bw, bh = out.pred_boxes.unbind(-1)
    br = torch.stack([(cx - bw / 2) * W, (cy - bh / 2) * H, (cx + bw / 2) * W, (cy + bh / 2) * H], -1)
    assert lo.shape == out.logits.shape and bo.shape == br.shape
    fo, fr = torch.cat([lo, bo / W], -1)[0], torch.cat([out.logits, br / W], -1)[0]
    j = torch.cdist(fo, fr).argmin(1)
    assert len(set(j.tolist())) == fo.shape[0], "queries do not pair up one to one"
    assert_rel_close(lo[0], out.logits[0, j], what="logits")
    assert_rel_close(bo[0], br[0, j], what="boxes")


def test_save_pretrained_folder_loads(tmp_path) -> None:
    """The names of transformers' files (save_pretrained / the Hub) convert like the in-memory ones."""
    from transformers import DFineForObjectDetection

    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    ref = DFineForObjectDetection(_config("n")).eval()
    randomize_norms(ref)
    ref.save_pretrained(str(tmp_path))
    model = LibreYOLO(str(tmp_path))
    assert (model.FAMILY, model.size) == ("dfine", "n")
    own = model.net.state_dict()
    direct = convert_foreign(ForeignWeights(source="transformers", arch="d_fine", state_dict=ref.state_dict(),
                                            path="<memory>")).net.state_dict()
    assert all(torch.equal(own[k], direct[k]) for k in own)


def test_deim_reads_dfine_files_only_when_named() -> None:
    from transformers import DFineForObjectDetection

    torch.manual_seed(0)
    ref = DFineForObjectDetection(_config("n")).eval()
    fw = ForeignWeights(source="transformers", arch="d_fine", state_dict=ref.state_dict(), path="<memory>")
    assert convert_foreign(fw).FAMILY == "dfine"
    deim = convert_foreign(fw, family="deim")
    assert (deim.FAMILY, deim.size) == ("deim", "n")
    dfine = convert_foreign(fw).net.state_dict()
    assert all(torch.equal(v, dfine[k]) for k, v in deim.net.state_dict().items())


def test_deim_silu_decoder_ffn_equals_transformers_silu_dfine() -> None:
    """DEIM's decoder FFN is SiLU (deim.yml ``activation: silu``): a transformers D-FINE with
    ``decoder_activation_function="silu"`` converts into DEIM and matches it. transformers keeps its
    query-position MLP on ReLU (DEIM's ``mlp_act: silu`` has no transformers setting), so that one
    head is set to ReLU for the comparison; the LQE and box heads' hidden activations do not reach
    the outputs at transformers' init (their last layers are zero)."""
    import dataclasses

    from transformers import DFineForObjectDetection

    from libreyolo.models._detr.dfine_net import DFineDetector

    torch.manual_seed(0)
    cfg = _config("n")
    cfg.decoder_activation_function = "silu"
    ref = DFineForObjectDetection(cfg).eval()
    randomize_norms(ref)
    deim = convert_foreign(ForeignWeights(source="transformers", arch="d_fine", state_dict=ref.state_dict(),
                                          path="<memory>"), family="deim")
    assert deim.net.cfg.act == "silu" and deim.net.cfg.mlp_act == "silu"
    net = DFineDetector(cfg=dataclasses.replace(deim.net.cfg, mlp_act="relu", num_queries=cfg.num_queries), nc=80)
    net.load_state_dict(deim.net.state_dict())
    x = torch.rand(1, 3, H, W, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = ref(pixel_values=x)
        lo, bo = net.eval()(x)
        relu = DFineDetector(cfg=dataclasses.replace(net.cfg, act="relu"), nc=80)
        relu.load_state_dict(net.state_dict())
        lo_relu, _ = relu.eval()(x)
    cx, cy, bw, bh = out.pred_boxes.unbind(-1)
    br = torch.stack([(cx - bw / 2) * W, (cy - bh / 2) * H, (cx + bw / 2) * W, (cy + bh / 2) * H], -1)
    j = torch.cdist(torch.cat([lo, bo / W], -1)[0], torch.cat([out.logits, br / W], -1)[0]).argmin(1)
    assert len(set(j.tolist())) == lo.shape[1]
    assert_rel_close(lo[0], out.logits[0, j], what="logits")
    assert_rel_close(bo[0], br[0, j], what="boxes")
    assert (lo_relu - lo).abs().max() > 1e-3  # the FFN activation matters at this init

"""SAM / MobileSAM: published parameter counts (3 %), TinyViT blocks against timm's, the seam's
stages, prompt handling in predict, mIoU validation and decoder fine-tuning on shapes-seg."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo.errors import ConfigError
from libreyolo.model import Model
from libreyolo.models._sam.prompt import Prompts
from libreyolo.models.mobilesam.family import PARAMS_M as MOBILE_PARAMS
from libreyolo.models.mobilesam.family import MobileSAM
from libreyolo.models.sam.family import SAM
from libreyolo.models.sam.variants import PARAMS_M


def _count(net: torch.nn.Module) -> tuple[float, float]:
    return (sum(p.numel() for p in net.parameters()) / 1e6,
            sum(p.numel() for p in net.image_encoder.parameters()) / 1e6)


@pytest.mark.parametrize("size", sorted(PARAMS_M))
def test_sam_parameter_counts_match_the_paper(size: str) -> None:
    with torch.device("meta"):
        net = SAM.build_net(size=size, nc=1, task="prompt")
    total, enc = _count(net)
    ref_total, ref_enc = PARAMS_M[size]
    assert abs(total - ref_total) / ref_total < 0.03 and abs(enc - ref_enc) / ref_enc < 0.03


def test_mobilesam_parameter_counts_match_the_paper() -> None:
    with torch.device("meta"):
        net = MobileSAM.build_net(size="vit_t", nc=1, task="prompt")
    total, enc = _count(net)
    ref_total, ref_enc = MOBILE_PARAMS["vit_t"]
    assert abs(total - ref_total) / ref_total < 0.03 and abs(enc - ref_enc) / ref_enc < 0.03
    # the prompt encoder + mask decoder are SAM's, parameter for parameter
    with torch.device("meta"):
        sam = SAM.build_net(size="vit_b", nc=1, task="prompt")
    assert total - enc == pytest.approx(_count(sam)[0] - _count(sam)[1], abs=1e-9)


def test_tinyvit_block_matches_timm() -> None:
    tiny_vit = pytest.importorskip("timm.models.tiny_vit")
    from libreyolo.models.mobilesam.nn import TinyViTBlock

    torch.manual_seed(0)
    ref = tiny_vit.TinyVitBlock(dim=64, num_heads=2, window_size=7).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ours = TinyViTBlock(64, 2, 7).eval()
    sd = {k.replace("local_conv.conv.", "local_conv.c."): v for k, v in ref.state_dict().items()
          if not k.endswith("num_batches_tracked")}
    ours.load_state_dict(sd)
    x = torch.randn(2, 10, 9, 64)  # padded windows
    with torch.no_grad():
        a, b = ours(x), ref(x)
    assert float((a - b).abs().max() / b.abs().max()) < 1e-5


def test_tinyvit_trunk_matches_timm_tiny_vit_5m() -> None:
    """The whole TinyViT-5M trunk (stem, MBConv stage, three attention stages with their merges)
    against timm's ``tiny_vit_5m_224`` with random weights and BatchNorm statistics; the only
    difference from MobileSAM's encoder is the last merge's stride (2 here, as timm; MobileSAM 1)
    and the neck, which timm does not have."""
    import re

    timm = pytest.importorskip("timm")
    from libreyolo.models.mobilesam.nn import TinyViTImageEncoder

    torch.manual_seed(0)
    ref = timm.create_model("tiny_vit_5m_224", pretrained=False).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        for n, b in ref.named_buffers():
            if n.endswith("running_var"):
                b.uniform_(0.5, 1.5)
            elif n.endswith("running_mean"):
                b.normal_(0, 0.1)

    def rename(k: str) -> str:
        k = re.sub(r"^patch_embed\.conv([12])\.", lambda m: f"patch_embed.seq.{2 * int(m[1]) - 2}.", k)
        if m := re.match(r"^stages\.(\d+)\.downsample\.(.*)$", k):  # timm merges at a stage's start, ours at the end
            k = f"layers.{int(m[1]) - 1}.downsample.{m[2]}"
        return re.sub(r"\.conv\.weight$", ".c.weight", re.sub(r"^stages\.", "layers.", k))

    ours = TinyViTImageEncoder(last_merge_stride=2).eval()
    sd = {rename(k): v for k, v in ref.state_dict().items()
          if not k.startswith("head.") and not k.endswith(("num_batches_tracked", "attention_bias_idxs"))}
    neck = {k: v for k, v in ours.state_dict().items() if k.startswith("neck.") or k.endswith("num_batches_tracked")}
    ours.load_state_dict({**neck, **sd})
    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = ours.trunk(x), ref.forward_features(x)
    assert a.shape == b.shape == (1, 320, 7, 7)
    assert float((a - b).abs().max() / b.abs().max()) < 1e-5


def test_attention_sites_carry_the_fused_attn_flag() -> None:
    from libreyolo.kernels.attention import fused_attention_modules

    for fam in (SAM, MobileSAM):
        m = fam(size=fam.SIZES[0])
        mods = fused_attention_modules(m.net)
        assert mods and not any(x.fused_attn for x in mods)  # off by default (SPEC K-9)
        m.set_arch(fused_attn=True)
        assert m.arch == {"fused_attn": True}


@pytest.mark.parametrize("fam", [SAM, MobileSAM], ids=["sam", "mobilesam"])
def test_seam_encoder_capturable_decoder_eager_and_prompts_reach_the_decoder(fam: type) -> None:
    torch.manual_seed(0)
    m = fam(size=fam.SIZES[0])
    stages = m.forward_stages()
    assert [(s.name, s.capturable) for s in stages] == [("image_encoder", True), ("prompt_decoder", False)]
    assert stages[1].reason
    x = torch.rand(1, 3, 64, 64)
    with torch.inference_mode():
        emb = stages[0].fn(x)
        default = stages[1].fn(emb)
        assert torch.equal(default[0], m.net(x)[0])  # no scope: the centre prompt, as net(x)
        box = Prompts(boxes=torch.tensor([[4.0, 4.0, 40.0, 30.0], [10.0, 20.0, 60.0, 60.0]]), multimask=True)
        with m.prompting(box):
            masks, iou, again = stages[1].fn(emb)
        assert masks.shape[:3] == (1, 2, 3) and iou.shape == (1, 2, 3) and again is emb
        direct, _ = m.decode_prompts(emb, box)
        assert torch.equal(masks, direct)
        assert not torch.equal(stages[1].fn(emb)[0], masks[:, :1, :1])  # the scope closed


def test_predict_with_points_boxes_and_multimask() -> None:
    torch.manual_seed(0)
    m = Model(SAM(size="tiny"))
    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    (r,) = m.predict(img, points=[[10, 20], [30, 30]], labels=[1, 0], boxes=[[5, 5, 40, 40], [20, 10, 70, 40]],
                     multimask_output=True)
    assert r.masks.data.shape == (6, 48, 80) and len(r.boxes) == 6  # 2 prompts x 3 masks
    assert r.prompts["boxes"].shape == (2, 4) and r.prompts["points"].shape == (2, 2, 2)
    drawn = r.plot()
    assert drawn.shape == (48, 80, 3) and (drawn != img).any()
    (one,) = m.predict(img, points=[[40, 24]])
    assert one.masks.data.shape == (1, 48, 80)
    with pytest.raises(ConfigError, match="labels"):
        m.predict(img, points=[[1, 2]], labels=[3])
    with pytest.raises(ConfigError, match="boxes"):
        m.predict(img, boxes=[[1, 2, 3]])


def test_prompts_map_to_the_network_input() -> None:
    """A box prompt in original pixels gives the same masks as that box letterboxed, fed directly."""
    torch.manual_seed(0)
    fam = SAM(size="tiny")
    m = Model(fam)
    img = np.random.default_rng(1).integers(0, 255, (32, 64, 3), dtype=np.uint8)  # ratio 1, pad (0, 16)
    seen = {}
    orig = fam.net.decode

    def spy(emb, prompts=None):
        seen["p"] = prompts
        return orig(emb, prompts)

    fam.net.decode = spy
    m.predict(img, boxes=[[4, 2, 30, 20]], fuse=False)
    assert torch.equal(seen["p"].boxes, torch.tensor([[4.0, 18.0, 30.0, 36.0]]))


@pytest.fixture(scope="module")
def shapes_seg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo.data.shapes_seg import ensure_shapes_seg_dataset

    return Path(ensure_shapes_seg_dataset(tmp_path_factory.mktemp("seg"), n_train=4, n_val=2, imgsz=64))


def test_val_reports_miou_over_prompts(shapes_seg: Path) -> None:
    torch.manual_seed(0)
    m = Model(SAM(size="tiny"))
    metrics = m.val(data=str(shapes_seg), imgsz=64, batch=2, device="cpu", plots=False, verbose=False)
    assert metrics["prompts"] > 0 and 0.0 <= metrics["mIoU_box"] <= 1.0 and 0.0 <= metrics["mIoU_point"] <= 1.0
    assert metrics["fitness"] == metrics["mIoU_box"]


def test_finetune_trains_the_decoder_with_the_encoder_frozen(shapes_seg: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Model(SAM(size="tiny"))
    enc0 = {k: v.clone() for k, v in m.net.image_encoder.state_dict().items()}
    dec0 = {k: v.clone() for k, v in m.net.mask_decoder.state_dict().items()}
    out = m.train(data=str(shapes_seg), epochs=2, imgsz=64, batch=2, device="cpu", workers=0,
                  project=str(tmp_path), name="ft", plots=False, val=True, lr0=1e-3)
    assert "mIoU_box" in out
    enc1, dec1 = m.net.image_encoder.state_dict(), m.net.mask_decoder.state_dict()
    assert all(torch.equal(enc0[k], enc1[k]) for k in enc0)  # frozen
    assert any(not torch.equal(dec0[k], dec1[k]) for k in dec0)  # fine-tuned


def test_saved_weights_load_by_name_and_predict_the_same(tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    m = Model(MobileSAM(size="vit_t"))
    path = tmp_path / "LibreMobileSAMvit_t-prompt.pt"
    m.save(str(path))
    loaded = LibreYOLO(str(path))
    assert (loaded.FAMILY, loaded.size, loaded.task, loaded.imgsz) == ("mobilesam", "vit_t", "prompt", 1024)
    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    a = m.predict(img, imgsz=64, points=[[10, 10]], fuse=False)[0]
    b = loaded.predict(img, imgsz=64, points=[[10, 10]], fuse=False)[0]
    assert torch.equal(a.masks.data, b.masks.data) and torch.equal(a.boxes.conf, b.boxes.conf)


def test_an_exported_model_refuses_prompts(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    m = Model(SAM(size="tiny"))
    path = m.export(format="onnx", imgsz=64, file=str(tmp_path / "sam.onnx"))
    img = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(ConfigError, match="default prompt"):
        LibreYOLO(str(path)).predict(img, boxes=[[1, 1, 30, 30]])


def test_official_checkpoint_layout_converts_dropping_the_tinyvit_head() -> None:
    """A MobileSAM checkpoint has our names plus TinyViT's unused classifier and bias-index tables."""
    from libreyolo.errors import CheckpointError
    from libreyolo.models._sam.convert import convert_official

    torch.manual_seed(0)
    net = MobileSAM.build_net(size="vit_t", nc=1, task="prompt")
    own = net.state_dict()
    src = {k: torch.randn_like(v) if v.is_floating_point() else v for k, v in own.items()}
    src |= {"image_encoder.head.weight": torch.zeros(1000, 320), "image_encoder.norm_head.weight": torch.ones(320),
            "image_encoder.layers.1.blocks.0.attn.attention_bias_idxs": torch.zeros(49, 49, dtype=torch.int64)}
    out = convert_official(src, own)
    assert set(out) == set(own) and torch.equal(out["mask_decoder.iou_token.weight"], src["mask_decoder.iou_token.weight"])
    del src["mask_decoder.iou_token.weight"]
    with pytest.raises(CheckpointError, match="iou_token"):
        convert_official(src, own)

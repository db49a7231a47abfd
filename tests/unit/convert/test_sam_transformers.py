"""SAM fidelity against transformers' ``SamModel`` (a small random configuration built offline):
converted weights give the same mask logits and IoU predictions within 1e-5 relative (fp32, eval)
for point, box and point + box prompts, single- and multi-mask; a converted checkpoint loads
through ``LibreYOLO``-style conversion; full-size parameter counts equal transformers'."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from libreyolo.models._sam.convert import convert_hf  # noqa: E402
from libreyolo.models._sam.prompt import Prompts  # noqa: E402
from libreyolo.models.sam.build import build_sam  # noqa: E402
from libreyolo.models.sam.variants import VARIANTS  # noqa: E402


def _tiny_reference() -> torch.nn.Module:
    img, dim, depth, heads, glob, win, out, dheads, dmlp, iouh = VARIANTS["tiny"]
    cfg = transformers.SamConfig(
        vision_config=dict(hidden_size=dim, num_hidden_layers=depth, num_attention_heads=heads, mlp_dim=4 * dim,
                           image_size=img, patch_size=16, window_size=win, global_attn_indexes=list(glob),
                           output_channels=out, num_pos_feats=out // 2),
        prompt_encoder_config=dict(hidden_size=out, image_size=img, image_embedding_size=img // 16,
                                   mask_input_channels=16),
        # the original checkpoints' decoder LayerNorms use eps 1e-5 (ours); transformers defaults to 1e-6
        mask_decoder_config=dict(hidden_size=out, mlp_dim=dmlp, num_attention_heads=dheads,
                                 iou_head_hidden_dim=iouh, layer_norm_eps=1e-5))
    torch.manual_seed(0)
    ref = transformers.SamModel(cfg).eval()
    with torch.no_grad():  # zero-initialised tables (relative positions, pos embed) get values too
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return ref


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


@pytest.mark.parametrize("multimask", [False, True])
@pytest.mark.parametrize("kind", ["points", "box", "both"])
def test_converted_tiny_sam_matches_transformers(kind: str, multimask: bool) -> None:
    ref = _tiny_reference()
    ours = build_sam("tiny").eval()
    ours.load_state_dict(convert_hf(ref.state_dict(), ours.state_dict()))
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    pts, lab = torch.tensor([[[20.0, 30.0], [40.0, 10.0]]]), torch.tensor([[1, 0]])
    box = torch.tensor([[5.0, 6.0, 50.0, 40.0]])
    use_pts, use_box = kind in ("points", "both"), kind in ("box", "both")
    kw = {}
    if use_pts:
        kw.update(input_points=pts[None], input_labels=lab[None])
    if use_box:
        kw.update(input_boxes=box[None])
    prompts = Prompts(points=pts if use_pts else None, labels=lab if use_pts else None,
                      boxes=box if use_box else None, multimask=multimask)
    with torch.no_grad():
        r = ref(pixel_values=(x - ours.pixel_mean) / ours.pixel_std, multimask_output=multimask, **kw)
        masks, iou, _ = ours.decode(ours.encode(x), prompts)
    assert masks.shape == r.pred_masks.shape and iou.shape == r.iou_scores.shape
    assert _rel(masks, r.pred_masks) < 1e-5 and _rel(iou, r.iou_scores) < 1e-5


def test_family_converter_reads_a_transformers_checkpoint() -> None:
    from libreyolo.convert import ForeignWeights, convert_foreign

    ref = _tiny_reference()
    fw = ForeignWeights(source="transformers", arch="sam", state_dict=ref.state_dict(), path="sam-tiny")
    model = convert_foreign(fw, family="sam")
    assert (model.FAMILY, model.size) == ("sam", "tiny")
    w = model.net.image_encoder.blocks[0].attn.qkv.weight
    assert torch.equal(w, ref.state_dict()["vision_encoder.layers.0.attn.qkv.weight"])


def test_libreyolo_loads_a_saved_transformers_sam(tmp_path) -> None:
    from libreyolo import LibreYOLO

    ref = _tiny_reference()
    ref.save_pretrained(str(tmp_path))
    model = LibreYOLO(str(tmp_path / "model.safetensors"))
    assert (model.FAMILY, model.size, model.task) == ("sam", "tiny", "prompt")
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    box = torch.tensor([[8.0, 8.0, 48.0, 40.0]])
    with torch.no_grad():
        r = ref(pixel_values=(x - model.net.pixel_mean) / model.net.pixel_std, input_boxes=box[None],
                multimask_output=False)
        masks, _ = model.decode_prompts(model.net.encode(x), Prompts(boxes=box))
    assert _rel(masks, r.pred_masks) < 1e-5


@pytest.mark.parametrize("size,hf", [
    ("vit_b", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, global_attn_indexes=[2, 5, 8, 11])),
    ("vit_h", dict(hidden_size=1280, num_hidden_layers=32, num_attention_heads=16,
                   global_attn_indexes=[7, 15, 23, 31])),
])
def test_full_size_parameter_count_equals_transformers(size: str, hf: dict) -> None:
    with torch.device("meta"):
        ours = build_sam(size)
        ref = transformers.SamModel(transformers.SamConfig(vision_config=hf))
    n_ours = sum(p.numel() for p in ours.parameters())
    # transformers stores the fixed random Fourier matrix (2 x 128) as a parameter; ours is a buffer
    n_ref = sum(p.numel() for p in ref.parameters()) - 2 * 128
    assert n_ours == n_ref

"""RT-DETR against Hugging Face ``transformers`` (issue 18): ``RTDetrForObjectDetection`` built from
configs matching our sizes (random init, fixed seed, random BatchNorm statistics), converted, both
run in eval mode on the same image. Outputs are compared per query after aligning the query order:
the top-300 query selection sorts encoder scores whose near-ties (gaps ~1e-7 with random weights)
may swap places between two implementations, which permutes the queries without changing them.
The image is small enough (96x128: 252 tokens) that every token is a query on both sides, so the
selected set is the same and only its order may differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

transformers = pytest.importorskip("transformers")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.convert import ForeignWeights, convert_foreign, detect_format  # noqa: E402
from libreyolo.errors import CheckpointError  # noqa: E402
from libreyolo.model import Model  # noqa: E402


@pytest.fixture(autouse=True)
def _portable_attention(monkeypatch: pytest.MonkeyPatch):
    """The portable ``ms_deform_attn`` (the Triton kernel would run in the slow CPU interpreter that
    the test suite enables; its parity with the portable path is tests/unit/attention's job)."""
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    registry.clear_cache()
    yield
    registry.clear_cache()


H, W = 96, 128
TOKENS = 21 * (H // 32) * (W // 32)  # strides 8, 16, 32: 16 + 4 + 1 tokens per 32x32 cell


def _config(size: str, *, v2: bool = False):
    from transformers import RTDetrConfig, RTDetrResNetConfig, RTDetrV2Config

    config = RTDetrV2Config if v2 else RTDetrConfig
    if size == "r50":
        return config(num_labels=80, num_queries=TOKENS)
    depths = [2, 2, 2, 2] if size == "r18" else [3, 4, 6, 3]
    backbone = RTDetrResNetConfig(depths=depths, layer_type="basic", hidden_sizes=[64, 128, 256, 512],
                                  embedding_size=64, out_features=["stage2", "stage3", "stage4"])
    return config(num_labels=80, backbone_config=backbone, encoder_in_channels=[128, 256, 512],
                  hidden_expansion=0.5, decoder_layers=3 if size == "r18" else 4, num_queries=TOKENS)


def _reference(size: str, *, v2: bool = False):
    from transformers import RTDetrForObjectDetection, RTDetrV2ForObjectDetection

    torch.manual_seed(0)
    ref = (RTDetrV2ForObjectDetection if v2 else RTDetrForObjectDetection)(_config(size, v2=v2)).eval()
    randomize_norms(ref)
    return ref


def _ref_outputs(ref, x):
    """(logits Tensor[B, Q, nc], boxes Tensor[B, Q, 4] xyxy pixels) from the reference."""
    h, w = x.shape[-2:]
    with torch.no_grad():
        out = ref(pixel_values=x)
    cx, cy, bw, bh = out.pred_boxes.unbind(-1)
    boxes = torch.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h], -1)
    return out.logits, boxes


def _assert_same_queries(ours: tuple, ref: tuple, *, w: int) -> None:
    (lo, bo), (lr, br) = ours, ref
    assert lo.shape == lr.shape and bo.shape == br.shape
    fo, fr = torch.cat([lo, bo / w], -1)[0], torch.cat([lr, br / w], -1)[0]
    j = torch.cdist(fo, fr).argmin(1)  # the reference query each of ours is
    paired = len(set(j.tolist()))
    assert paired == fo.shape[0], f"only {paired} of {fo.shape[0]} queries pair up one to one"
    assert_rel_close(lo[0], lr[0, j], what="logits")
    assert_rel_close(bo[0], br[0, j], what="boxes")


@pytest.mark.parametrize("size", ["r18", "r34", "r50"])
def test_outputs_equal_transformers(size: str) -> None:
    ref = _reference(size)
    model = convert_foreign(ForeignWeights(source="transformers", arch="rt_detr", state_dict=ref.state_dict(),
                                           path="<memory>"))
    assert (model.FAMILY, model.size, model.nc) == ("rtdetr", size, 80)
    x = torch.rand(1, 3, H, W, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model.net.eval()(x)
    _assert_same_queries(ours, _ref_outputs(ref, x), w=W)


@pytest.mark.parametrize("size", ["r18", "r34"])
def test_rtdetrv2_outputs_equal_transformers(size: str) -> None:
    ref = _reference(size, v2=True)
    model = convert_foreign(ForeignWeights(source="transformers", arch="rt_detr_v2", state_dict=ref.state_dict(),
                                           path="<memory>"))
    assert (model.FAMILY, model.size, model.nc) == ("rtdetrv2", size, 80)
    x = torch.rand(1, 3, H, W, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours = model.net.eval()(x)
    _assert_same_queries(ours, _ref_outputs(ref, x), w=W)


def test_hub_folder_loads_and_misfit_is_named(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    ref = _reference("r18")
    folder = tmp_path / "rtdetr_r18vd"
    folder.mkdir()
    ref.save_pretrained(str(folder))  # the Hub layout: config.json + model.safetensors
    assert detect_format(folder / "model.safetensors") == "transformers"
    model = LibreYOLO(str(folder))
    assert (model.FAMILY, model.size) == ("rtdetr", "r18")
    x = torch.rand(1, 3, H, W, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = model.net.eval()(x)
    _assert_same_queries(ours, _ref_outputs(ref, x), w=W)
    sd = {k: v.contiguous() for k, v in ref.state_dict().items()}
    sd["model.decoder.layers.0.mlp.fc1.weight"] = torch.zeros(3, 3)
    bad = tmp_path / "bad"
    bad.mkdir()
    save_file(sd, str(bad / "model.safetensors"))
    (bad / "config.json").write_text(json.dumps({"model_type": "rt_detr"}))
    with pytest.raises(CheckpointError, match=r"decoder\.layers\.0\.linear1\.weight") as e:
        LibreYOLO(str(bad))
    assert "\n" not in str(e.value)


def test_predict_boxes_match_transformers_postprocessing() -> None:
    """``predict()`` of the converted model against the reference's own post-processing
    (``RTDetrImageProcessor.post_process_object_detection``) on the same image: each of our 20 best
    detections is one of the reference's, same class, score within 1e-4, box within 1 pixel. The
    image already has the network's input size (96x128), so neither side resizes it."""
    import numpy as np
    from PIL import Image
    from transformers import RTDetrImageProcessor

    ref = _reference("r18")
    model = convert_foreign(ForeignWeights(source="transformers", arch="rt_detr", state_dict=ref.state_dict(),
                                           path="<memory>"))
    rgb = (torch.rand(H, W, 3, generator=torch.Generator().manual_seed(4)) * 255).to(torch.uint8).numpy()
    ours = Model(model).predict(Image.fromarray(rgb), imgsz=W, conf=0.0, max_det=300)[0].boxes
    pixels = torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1)[None].float() / 255
    with torch.no_grad():
        out = ref(pixel_values=pixels)
    theirs = RTDetrImageProcessor().post_process_object_detection(out, threshold=0.0, target_sizes=[(H, W)])[0]
    assert len(ours.conf) > 20
    for i in range(20):
        same = ((theirs["labels"] == ours.cls[i].long()) & ((theirs["scores"] - ours.conf[i]).abs() < 1e-4)
                & ((theirs["boxes"] - ours.xyxy[i]).abs().amax(-1) <= 1.0))
        assert same.any(), f"our detection {i} ({ours.xyxy[i].tolist()}, {float(ours.conf[i]):.4f}) is not theirs"

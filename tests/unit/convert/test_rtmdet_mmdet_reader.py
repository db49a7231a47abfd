"""mmdetection RTMDet / RTMDet-Ins checkpoints without mmdetection (which CI cannot install): our
random networks written under the reference's tensor names (shared-conv aliases, the box tower that
RTMDet-Ins aliases to its class tower, BGR stem) and BatchNorm eps 1e-5, saved as mmdetection
publishes them (``{"meta": {"dataset_meta": {"classes"}}, "state_dict"}``), are recognised, load
through ``LibreYOLO(path)`` as the right family, size, classes and names, and predict the same raw
outputs. Fidelity against mmdetection's own code: ``test_rtmdet_ins_mmdet.py``,
``test_rtmdet_mmdet.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from libreyolo import LibreYOLO
from libreyolo.convert import detect_format
from libreyolo.errors import CheckpointError
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.models.rtmdet.nn import build_rtmdet
from libreyolo.models.rtmdet_ins.nn import build_rtmdet_ins

_NECK = {"reduce5": "reduce_layers.0", "reduce4": "reduce_layers.1", "top4": "top_down_blocks.0",
         "top3": "top_down_blocks.1", "down3": "downsamples.0", "down4": "downsamples.1",
         "bottom4": "bottom_up_blocks.0", "bottom5": "bottom_up_blocks.1"}


def as_mmdet(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict under mmdetection's names, written out plainly (the inverse of the converter)."""
    instance = not any(k.startswith("head.reg_convs.") for k in sd)
    out = {}
    for k, v in sd.items():
        parts = k.replace(".dconv.", ".depthwise_conv.").replace(".pconv.", ".pointwise_conv.").split(".")
        if parts[0] == "neck" and parts[1] in _NECK:
            parts = ["neck", *_NECK[parts[1]].split("."), *parts[2:]]
        if k == "backbone.stem.0.conv.weight":
            v = v.flip(1)  # the reference reads BGR
        if parts[0] == "head" and parts[1] in ("cls_convs", "reg_convs"):
            i = parts[2]
            branches = ("cls_convs", "reg_convs") if instance else (parts[1],)
            for branch in branches:
                if parts[3] == "conv":  # one conv, stored once per level
                    for level in range(3):
                        out[f"bbox_head.{branch}.{level}.{i}.conv.{parts[-1]}"] = v
                else:  # bns.<level>.<tensor>
                    out[f"bbox_head.{branch}.{parts[4]}.{i}.bn.{parts[5]}"] = v
            continue
        if parts[0] == "head":
            parts[0] = "bbox_head"
        out[".".join(parts)] = v
    return out


def _reference_like(build, size: str, nc: int) -> nn.Module:
    torch.manual_seed(0)
    net = build(size=size, nc=nc)
    randomise_norm_stats(net, seed=0)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps = 1e-5  # as mmdetection trains it
    return net.eval()


@pytest.mark.parametrize("family,build,size", [("rtmdet_ins", build_rtmdet_ins, "t"), ("rtmdet_ins", build_rtmdet_ins, "s"),
                                               ("rtmdet", build_rtmdet, "t")])
def test_published_layout_loads_by_path_and_predicts_the_same(family: str, build, size: str, tmp_path: Path) -> None:
    names = ["circle", "square", "triangle"]
    ref = _reference_like(build, size, nc=3)
    path = tmp_path / "rtmdet.pth"
    torch.save({"meta": {"mmdet_version": "3.3.0", "dataset_meta": {"classes": tuple(names)}, "epoch": 300},
                "state_dict": as_mmdet(ref.state_dict())}, path)
    assert detect_format(path) == "mmdet"
    model = LibreYOLO(str(path))
    assert (model.FAMILY, model.size, model.nc) == (family, size, 3)
    assert [model.names[i] for i in range(3)] == names
    x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(x)
        got = model.net.eval()(x)
    for w, g in zip(want, got, strict=True):
        assert (w - g).abs().max() <= 1e-5 * max(1.0, float(w.abs().max()))
    native = tmp_path / "native.pt"
    model.save(native)
    assert detect_format(native) is None and LibreYOLO(str(native)).FAMILY == family


def test_a_checkpoint_of_the_wrong_layout_is_refused(tmp_path: Path) -> None:
    sd = as_mmdet(_reference_like(build_rtmdet_ins, "t", nc=3).state_dict())
    sd.pop("bbox_head.mask_head.projection.weight")
    path = tmp_path / "broken.pth"
    torch.save({"state_dict": sd}, path)
    with pytest.raises(CheckpointError, match="projection.weight"):
        LibreYOLO(str(path))

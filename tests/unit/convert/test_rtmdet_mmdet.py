"""rtmdet against mmdetection's own RTMDet detector, when mmdetection imports (CI's references
step runs it against the copy ``.ci/mmdet_refs.py`` builds, see ``test_rtmdet_ins_mmdet.py``):
built from the shipped ``configs/rtmdet/rtmdet_*_8xb32-300e_coco.py`` (BatchNorm instead of
SyncBN, no pretrained backbone) with a fixed seed and random BatchNorm statistics, converted with the lineage's
:mod:`libreyolo.models._rtmdet.convert` (BatchNorm eps folded into the weights); class logits and box distances equal within 1e-5 relative."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

mmdet = pytest.importorskip("mmdet")

from libreyolo.models._rtmdet.convert import convert_state_dict  # noqa: E402
from libreyolo.models.rtmdet.nn import build_rtmdet  # noqa: E402

MEAN_BGR = (103.53, 116.28, 123.675)
STD_BGR = (57.375, 57.12, 58.395)


@pytest.mark.parametrize("size,name", [("t", "tiny"), ("m", "m")])  # m: exp on the distances
def test_outputs_equal_mmdetection(size: str, name: str) -> None:
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    from mmengine.config import Config

    register_all_modules()
    cfg = Config.fromfile(str(Path(mmdet.__file__).parent / ".mim" / "configs" / "rtmdet" /
                              f"rtmdet_{name}_8xb32-300e_coco.py"))
    m = cfg.model
    m.backbone.init_cfg = None
    for part in (m.backbone, m.neck, m.bbox_head):
        part.norm_cfg = dict(type="BN")
    torch.manual_seed(0)
    ref = MODELS.build(m)
    randomize_norms(ref)
    ref.eval()
    ours = build_rtmdet(size=size, nc=80)
    ours.load_state_dict(convert_state_dict(ref.state_dict(), ours.state_dict()))
    ours.eval()
    x = torch.rand(1, 3, 96, 128, generator=torch.Generator().manual_seed(1))
    inp = (x.flip(1) * 255 - torch.tensor(MEAN_BGR).view(1, 3, 1, 1)) / torch.tensor(STD_BGR).view(1, 3, 1, 1)
    with torch.no_grad():
        cls, box = ref.bbox_head(ref.extract_feat(inp))
        raw = ours(x)
    for level, (c, b, s) in enumerate(zip(cls, box, (8, 16, 32), strict=True)):
        dist = raw[level][:, :4].exp() if ours.exp_on_reg else raw[level][:, :4]
        assert_rel_close(dist * s, b, what=f"{size} box level {level}")
        assert_rel_close(raw[level][:, 4:], c, what=f"{size} cls level {level}")

"""rtmdet_ins against mmdetection's own RTMDet-Ins, when mmdetection imports: the reference is
built from its shipped configs (``configs/rtmdet/rtmdet-ins_*``, BatchNorm instead of SyncBN,
no pretrained backbone) with a fixed seed and random BatchNorm statistics; its state dict converts
onto ours (:mod:`libreyolo.models.rtmdet_ins.convert`, BatchNorm eps folded) and both run in eval mode on the same image
(ours RGB in [0, 1], the reference BGR normalised as its data preprocessor does): class logits,
box distances, kernel parameters and mask features, then the dynamic convolution of the same
detections, equal within 1e-5 relative (fp32); and the loss (the reference's ``loss_by_feat`` on the
same head outputs and objects) within 2e-6 relative per term.

mmdetection needs mmcv, whose compiled ops do not build here, so it is not in the ``ref`` test
extra; CI's references step (``.ci/run``) runs this file against a folder built by
``.ci/mmdet_refs.py``: the mmdet 3.3.0 and mmengine 0.10.7 wheels with pycocotools / addict / yapf /
termcolor / terminaltables / six / shapely (``pip install --no-deps --target``), and the Python
package of mmcv 2.1.0's source distribution with ``mmcv/ops`` replaced by a stub that only provides
names (they raise if called; the NMS is patched below). By hand:
``.venv/bin/python .ci/mmdet_refs.py DIR`` then ``PYTHONPATH=.:DIR`` for pytest; without
mmdetection the file skips.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

mmdet = pytest.importorskip("mmdet")

from libreyolo.models.rtmdet_ins.convert import convert_state_dict, load_reference, rename_key  # noqa: E402
from libreyolo.models.rtmdet_ins.nn import build_rtmdet_ins  # noqa: E402
from libreyolo.models.rtmdet_ins.postprocess import dynamic_mask_logits  # noqa: E402

MEAN_BGR = (103.53, 116.28, 123.675)
STD_BGR = (57.375, 57.12, 58.395)
CONFIGS = {"t": "rtmdet-ins_tiny_8xb32-300e_coco.py", "s": "rtmdet-ins_s_8xb32-300e_coco.py",
           "m": "rtmdet-ins_m_8xb32-300e_coco.py"}


def _reference(size: str):
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    from mmengine.config import Config

    register_all_modules()
    cfg = Config.fromfile(str(Path(mmdet.__file__).parent / ".mim" / "configs" / "rtmdet" / CONFIGS[size]))
    m = cfg.model
    m.backbone.init_cfg = None
    for part in (m.backbone, m.neck, m.bbox_head):
        part.norm_cfg = dict(type="BN")
    torch.manual_seed(0)
    ref = MODELS.build(m)
    randomize_norms(ref)
    return ref.eval()


def _reference_input(x: torch.Tensor) -> torch.Tensor:
    bgr = x.flip(1) * 255
    return (bgr - torch.tensor(MEAN_BGR).view(1, 3, 1, 1)) / torch.tensor(STD_BGR).view(1, 3, 1, 1)


@pytest.mark.parametrize("size", list(CONFIGS))
def test_outputs_and_masks_equal_mmdetection(size: str) -> None:
    ref = _reference(size)
    ours = build_rtmdet_ins(size=size, nc=80)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    load_reference(ours, ref.state_dict())
    ours.eval()
    x = torch.rand(1, 3, 96, 128, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cls, box, kern, mask_feat = ref.bbox_head(ref.extract_feat(_reference_input(x)))
        raw = ours(x)
    for level, (c, b, k, s) in enumerate(zip(cls, box, kern, (8, 16, 32), strict=True)):
        assert_rel_close(raw[level][:, :4] * s, b, what=f"{size} box level {level}")
        assert_rel_close(raw[level][:, 4:84], c, what=f"{size} cls level {level}")
        assert_rel_close(raw[level][:, 84:], k, what=f"{size} kernels level {level}")
    assert_rel_close(raw[3], mask_feat, what=f"{size} mask features")

    # the dynamic convolution for 12 points spread over the three levels
    head = ref.bbox_head
    priors = head.prior_generator.grid_priors([c.shape[-2:] for c in cls], device=x.device, with_stride=True)
    priors = torch.cat(priors)  # (A, 4): x, y, stride_w, stride_h
    kernels = torch.cat([k[0].flatten(1) for k in kern], 1).T  # (A, 169)
    pick = torch.linspace(0, priors.shape[0] - 1, 12).long()
    with torch.no_grad():
        want = head._mask_predict_by_feat_single(mask_feat[0], kernels[pick], priors[pick])
        got = dynamic_mask_logits(raw[3][0], kernels[pick], priors[pick, :2], priors[pick, 2], feat_stride=8)
    assert_rel_close(got, want, what=f"{size} mask logits")


def test_reference_keys_all_have_a_place_and_its_checkpoint_loads_by_path(tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    ref = _reference("t")
    path = tmp_path / "rtmdet-ins_tiny.pth"
    torch.save({"meta": {"dataset_meta": {"classes": tuple(f"c{i}" for i in range(80))}},
                "state_dict": ref.state_dict()}, path)
    model = LibreYOLO(str(path))
    assert (model.FAMILY, model.size, model.nc, model.names[79]) == ("rtmdet_ins", "t", 80, "c79")
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = ref.bbox_head(ref.extract_feat(_reference_input(x)))[3]
        assert_rel_close(model.net.eval()(x)[3], want, what="mask features after LibreYOLO(path)")
    own = build_rtmdet_ins(size="t", nc=80).state_dict()
    out = convert_state_dict(ref.state_dict(), own)
    assert set(out) == set(own)
    dropped = [k for k in ref.state_dict() if rename_key(k) is None or k.startswith("bbox_head.reg_convs.")]
    assert dropped and all(".reg_convs." in k or ".cls_convs." in k for k in dropped)
    # the reference's box tower is its class tower (the same module objects)
    assert ref.bbox_head.reg_convs[1][0] is ref.bbox_head.cls_convs[1][0]


def _ground_truth(h: int, w: int, per_image: tuple[int, ...]):
    """L-shaped objects on the stride-4 grid (centre of mass far from the box centre): the
    reference's full-resolution masks (4 x 4 blocks, so its ``[2::4]`` sampling and centre of mass
    see the same masks) and our batch (masks at stride 4)."""
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData

    g = torch.Generator().manual_seed(2)
    gts, idx, cls, boxes, masks = [], [], [], [], []
    for b, n in enumerate(per_image):
        m4 = torch.zeros(n, h // 4, w // 4, dtype=torch.uint8)
        bx, lab = [], []
        for i in range(n):
            x0 = int(torch.randint(0, w // 4 - 10, (1,), generator=g))
            y0 = int(torch.randint(0, h // 4 - 10, (1,), generator=g))
            bw, bh = (int(torch.randint(6, 10, (1,), generator=g)) for _ in range(2))
            m4[i, y0:y0 + bh, x0:x0 + max(bw // 3, 1)] = 1
            m4[i, y0 + 2 * bh // 3:y0 + bh, x0:x0 + bw] = 1
            bx.append([x0 * 4, y0 * 4, (x0 + bw) * 4, (y0 + bh) * 4])
            lab.append(int(torch.randint(0, 80, (1,), generator=g)))
        full = m4.repeat_interleave(4, 1).repeat_interleave(4, 2)
        bx_t = torch.tensor(bx, dtype=torch.float32)
        gts.append(InstanceData(bboxes=bx_t, labels=torch.tensor(lab), masks=BitmapMasks(full.numpy(), h, w)))
        idx += [b] * n
        cls += lab
        boxes.append(bx_t)
        masks.append(m4)
    bx = torch.cat(boxes)
    cxcywh = torch.cat(((bx[:, :2] + bx[:, 2:]) / 2, bx[:, 2:] - bx[:, :2]), 1) / torch.tensor([w, h, w, h])
    batch = {"batch_idx": torch.tensor(idx), "cls": torch.tensor(cls), "bboxes": cxcywh, "masks": torch.cat(masks)}
    return gts, batch


def test_loss_equals_mmdetection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference's ``loss_by_feat`` (assignment with the mask centre of mass, QFL, GIoU,
    dice at stride 4) and ours on the same head outputs and objects: each weighted term within
    2e-6 relative; the same objects with box centres instead of mask centres differ by more."""
    import libreyolo.models.rtmdet_ins.loss as ins_loss
    from libreyolo.models.rtmdet_ins.loss import RTMDetInsLoss

    ref = _reference("t")
    ref.bbox_head.init_weights()  # the reference's head initialisation: boxes of two strides
    h, w = 96, 128
    x = torch.rand(2, 3, h, w, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cls, box, kern, mask_feat = ref.bbox_head(ref.extract_feat(_reference_input(x)))
    gts, batch = _ground_truth(h, w, (3, 2))
    metas = [{"img_shape": (h, w), "pad_shape": (h, w), "batch_input_shape": (h, w)}] * 2
    want = ref.bbox_head.loss_by_feat(cls, box, kern, mask_feat, gts, metas)
    want = torch.tensor([float(sum(want[k])) if isinstance(want[k], (list, tuple)) else float(want[k])
                         for k in ("loss_cls", "loss_bbox", "loss_mask")])
    raw = [torch.cat((b / s, c, k), 1) for b, c, k, s in zip(box, cls, kern, (8, 16, 32), strict=True)] + [mask_feat]
    crit = RTMDetInsLoss(build_rtmdet_ins(size="t", nc=80))
    _, got = crit(raw, batch)
    assert bool((want > 0).all())
    assert torch.allclose(got, want, rtol=2e-6, atol=0), (got.tolist(), want.tolist())
    monkeypatch.setattr(ins_loss, "mask_centers", lambda m, boxes, mask_stride: (boxes[:, :2] + boxes[:, 2:]) / 2)
    _, box_centred = crit(raw, batch)
    assert not torch.allclose(box_centred, want, rtol=2e-6, atol=0)


def _diamond_kernel_bias(c: float) -> torch.Tensor:
    """Kernel parameters whose mask logit is ``c - |rel_x| - |rel_y|``: a diamond around the point."""
    k = torch.zeros(169)
    w1 = torch.zeros(8, 10)
    w1[0, 0], w1[1, 0], w1[2, 1], w1[3, 1] = 1.0, -1.0, 1.0, -1.0
    k[:80], k[80:144], k[144:152] = w1.reshape(-1), torch.eye(8).reshape(-1), -torch.ones(8)
    k[-1] = c
    return k


def test_predictions_match_mmdetection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference's ``predict_by_feat`` (its NMS, a compiled mmcv op, replaced by torchvision's
    ``batched_nms``) and our postprocess + masks on the same network: the same detections (boxes
    within 1e-3 px, scores within 1e-5, labels); the masks, theirs thresholded after x8 logit
    upsampling and ours after x2 then x4 probability upsampling, at mean IoU > 0.97."""
    import mmdet.models.dense_heads.rtmdet_ins_head as ref_head
    import torch.nn.functional as F
    import torchvision

    from libreyolo.models.rtmdet_ins.postprocess import assemble_masks, postprocess

    def nms(boxes, scores, idxs, cfg):  # noqa: ANN001, ANN202 - mmcv.ops.batched_nms's contract
        keep = torchvision.ops.batched_nms(boxes, scores, idxs, cfg["iou_threshold"])
        return torch.cat((boxes[keep], scores[keep, None]), 1), keep

    monkeypatch.setattr(ref_head, "batched_nms", nms)
    ref = _reference("t")
    head = ref.bbox_head
    head.init_weights()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # spread the scores and boxes, give every point a diamond mask
        for level in head.cls_convs:
            for conv_module in level:
                conv_module.conv.weight.copy_(torch.randn(conv_module.conv.weight.shape, generator=g) * 0.05)
        for c, r, k in zip(head.rtm_cls, head.rtm_reg, head.rtm_kernel, strict=True):
            c.weight.copy_(torch.randn(c.weight.shape, generator=g))
            c.bias.fill_(-1.5)
            r.weight.copy_(torch.randn(r.weight.shape, generator=g) * 0.05)
            k.weight.copy_(torch.randn(k.weight.shape, generator=g) * 0.01)
            k.bias.copy_(_diamond_kernel_bias(0.3))
    ours = load_reference(build_rtmdet_ins(size="t", nc=80), ref.state_dict()).eval()
    h, w = 96, 128
    x = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cls, box, kern, mask_feat = head(ref.extract_feat(_reference_input(x)))
        conf = float(torch.cat([c.sigmoid().flatten() for c in cls]).topk(600).values[-1])
        assert all(int((c.sigmoid() > conf).sum()) < 1000 for c in cls)  # below the reference's nms_pre
        cfg = head.test_cfg.copy()
        cfg["score_thr"] = conf
        want = head.predict_by_feat(cls, box, kern, mask_feat, cfg=cfg, rescale=False,
                                    batch_img_metas=[{"img_shape": (h, w), "ori_shape": (h, w)}])[0]
        raw = ours(x)
        det = postprocess(raw, net=ours, conf=conf, iou=cfg["nms"]["iou_threshold"], classes=None,
                          max_det=cfg["max_per_img"], agnostic=False)[0]
        probs = assemble_masks(raw[3][0], det)
    assert len(det) == len(want.bboxes) == cfg["max_per_img"]
    unmatched = list(range(len(det)))
    ious = []
    mine = F.interpolate(probs[None], size=(h, w), mode="bilinear", align_corners=False)[0] > 0.5
    for i in range(len(want.bboxes)):  # near-equal scores may order differently: match rows
        hit = [j for j in unmatched if int(det[j, 5]) == int(want.labels[i])
               and float((det[j, :4] - want.bboxes[i]).abs().max()) <= 1e-3 and abs(float(det[j, 4] - want.scores[i])) <= 1e-5]
        assert hit, f"reference detection {i} ({want.bboxes[i].tolist()}, {float(want.scores[i]):.6f}) not found"
        unmatched.remove(hit[0])
        a, b = want.masks[i], mine[hit[0]]
        ious.append(float((a & b).sum()) / max(float((a | b).sum()), 1.0))
    assert 0.0 < float(want.masks.float().mean()) < 0.5  # the masks are neither empty nor everything
    assert sum(ious) / len(ious) > 0.97, ious

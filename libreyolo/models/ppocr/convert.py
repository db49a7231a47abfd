"""PP-OCR weights from the PaddleOCR inference models exported to ONNX (Paddle2ONNX), e.g. the
``ch_PP-OCRv4_det_infer.onnx`` / ``ch_PP-OCRv4_rec_infer.onnx`` files shipped inside the
``rapidocr_onnxruntime`` wheel.

Those graphs hold the deployed (re-parameterised) networks with their weights as ``Constant``
nodes named after the Paddle parameters. The weights are read in graph order and matched, tensor by
tensor, to our fused network's parameters in execution order (a forward pass records which leaf
module runs when); every shape must agree (a ``MatMul`` weight is our ``Linear`` weight
transposed), so a layout mismatch fails loudly instead of loading wrong numbers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...errors import CheckpointError

_SKIP = re.compile(r"^(p2o\.|fill_constant|Constant@)")  # shape / scalar constants, not weights
_LEAVES = (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.Linear, nn.LayerNorm)


def onnx_weights(path: str | Path) -> list[tuple[str, Tensor]]:
    """The named weight constants of a Paddle2ONNX graph, in node order (BatchNorm: scale, shift,
    mean, variance)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    consts = {nd.output[0]: nd for nd in model.graph.node if nd.op_type == "Constant"}
    out, seen = [], set()
    for nd in model.graph.node:
        if nd.op_type == "Constant":
            continue
        for name in nd.input:
            if name in consts and name not in seen and not _SKIP.match(name):
                seen.add(name)
                out.append((name, torch.from_numpy(numpy_helper.to_array(consts[name].attribute[0].t).copy())))
    return out


def paddle_onnx_chars(path: str | Path, *, space: bool = True) -> list[str]:
    """The character dictionary a PaddleOCR recogniser export carries in its ``character`` metadata
    (one per line; PaddleOCR's ``use_space_char`` adds the space), e.g. 6623 + 1 for PP-OCRv4."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    if "character" not in meta:
        raise CheckpointError(f"{Path(path).name} has no 'character' metadata; pass the dictionary file "
                              "(libreyolo.data.ocr.read_dict) as the family's names")
    chars = [c for c in meta["character"].split("\n") if c != ""]
    return chars + [" "] if space and " " not in chars else chars


def execution_slots(module: nn.Module, *inputs: Any) -> list[tuple[str, Tensor]]:
    """(name, tensor) of every parameter / BatchNorm statistic of ``module``'s leaves in the order
    they run on ``inputs``; learnable scalar pairs (``scale``, ``bias``) count as leaves too."""
    from .nn import Affine

    order: list[nn.Module] = []
    hooks = [m.register_forward_pre_hook(lambda mod, _a: order.append(mod) if mod not in order else None)
             for m in module.modules() if isinstance(m, (*_LEAVES, Affine))]
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in hooks:
            h.remove()
    names = {id(m): n for n, m in module.named_modules()}
    slots = []
    for m in order:
        keys = ["weight", "bias", "running_mean", "running_var"] if isinstance(m, nn.BatchNorm2d) else \
            ["scale", "bias"] if isinstance(m, Affine) else ["weight", "bias"]
        slots += [(f"{names[id(m)]}.{k}", getattr(m, k)) for k in keys if getattr(m, k, None) is not None]
    return slots


@torch.no_grad()
def load_onnx_into(module: nn.Module, path: str | Path, *inputs: Any) -> int:
    """Copy the weights of the ONNX graph at ``path`` into the fused ``module`` (run on ``inputs``
    to learn its execution order); returns the number of tensors copied."""
    theirs, ours = onnx_weights(path), execution_slots(module, *inputs)
    linear = {id(m.weight) for m in module.modules() if isinstance(m, nn.Linear)}  # MatMul weights: (in, out)
    if len(theirs) != len(ours):
        raise CheckpointError(f"{Path(path).name}: {len(theirs)} weight tensors, the network has {len(ours)}; "
                              "not the architecture of this size")
    for (tname, t), (oname, o) in zip(theirs, ours, strict=True):
        if id(o) in linear and t.ndim == 2:
            t = t.T
        if t.shape != o.shape and t.numel() == o.numel() and t.squeeze().shape == o.squeeze().shape:
            t = t.reshape(o.shape)  # a bias kept as (1, C, 1, 1)
        if t.shape != o.shape:
            raise CheckpointError(f"{Path(path).name}: {tname} is {tuple(t.shape)} but {oname} is {tuple(o.shape)}")
        o.copy_(t.to(o.dtype))
    return len(ours)


def from_paddle_onnx(fam: Any, det: str | Path, rec: str | Path, cls: str | Path | None = None) -> Any:
    """A fused ``PPOCR`` family with the detector and recogniser weights of two ONNX inference models
    and, when ``cls`` names one, the angle classifier's (:func:`load_angle_classifier`). The family's
    ``names`` must be the recogniser's dictionary (its CTC width)."""
    fam.net.eval()
    fam.fuse()
    dev = fam.device
    load_onnx_into(PaddleDetBody(fam.net.det), det, torch.zeros(1, 3, 64, 64, device=dev))
    h, w = fam.net.rec_hw
    load_onnx_into(PaddleRecBody(fam.net.rec), rec, torch.zeros(1, 3, h, w, device=dev))
    if cls is not None:
        load_angle_classifier(fam, cls)
    return fam


def load_angle_classifier(fam: Any, path: str | Path) -> Any:
    """Load the text-line angle classifier of an ONNX inference model (PaddleOCR's
    ``ch_ppocr_mobile_v2.0_cls_infer.onnx``) into ``fam.net.cls`` and mark it loaded, so that
    ``predict`` turns lines classified upside down (``angle_cls=None``: on). Returns ``fam``.

    Raises:
        CheckpointError: the file is missing or is not a 2-class classifier of this architecture.
    """
    from .cls import ANGLES, CLS_HW

    if not Path(path).is_file():
        raise CheckpointError(f"angle classifier {str(path)!r} not found; pass the path of an ONNX export such as "
                              "ch_ppocr_mobile_v2.0_cls_infer.onnx (the rapidocr_onnxruntime wheel ships one)")
    out = _output_width(path)
    if out != len(ANGLES):
        raise CheckpointError(f"{Path(path).name} gives {out} classes, an angle classifier gives {len(ANGLES)} "
                              "(0 and 180 degrees); is it a recogniser or detector export?")
    net = fam.net.cls
    was = net.training
    net.eval()
    try:
        load_onnx_into(PaddleClsBody(net), path, torch.zeros(1, 3, *CLS_HW, device=fam.device))
    finally:
        net.train(was)
    fam.net.cls_loaded.fill_(True)
    return fam


def _output_width(path: str | Path) -> int | None:
    """The last dimension of the graph's first output, when the file states it."""
    import onnx
    from google.protobuf.message import DecodeError  # onnx's own dependency

    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, OSError) as e:
        raise CheckpointError(f"{Path(path).name} is not a readable ONNX model: {e}") from e
    dims = model.graph.output[0].type.tensor_type.shape.dim if model.graph.output else []
    return int(dims[-1].dim_value) if dims and dims[-1].dim_value > 0 else None


class PaddleClsBody(nn.Module):
    """The angle classifier on an already normalised input (what the Paddle graph takes): probabilities."""

    def __init__(self, cls: nn.Module) -> None:
        super().__init__()
        self.cls = cls

    def forward(self, z: Tensor) -> Tensor:
        return self.cls.logits(z).softmax(-1)


class PaddleRecBody(nn.Module):
    """The recogniser on an already normalised input (what the Paddle graph takes)."""

    def __init__(self, rec: nn.Module) -> None:
        super().__init__()
        self.rec = rec

    def forward(self, z: Tensor) -> Tensor:
        f = self.rec.neck(self.rec.backbone(z))
        return self.rec.fc(f.squeeze(2).transpose(1, 2)).softmax(-1)


class PaddleDetBody(nn.Module):
    """The detector on an already normalised BGR input, eval branch only (what the Paddle graph holds)."""

    def __init__(self, det: nn.Module) -> None:
        super().__init__()
        self.det = det

    def forward(self, z: Tensor) -> Tensor:
        return self.det.binarize(self.det.neck(self.det.backbone(z)))

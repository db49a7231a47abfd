"""Build super-gradients' YOLO-NAS from its own module source, without its package imports.

super-gradients 3.7.1 installs with ``pip install --no-deps`` (a pure wheel), but importing it
pulls in its whole trainer (hydra, omegaconf, torchmetrics==0.8, numpy<=1.23, onnxruntime==1.15,
...), which this environment cannot have. The YOLO-NAS network itself needs none of that, so this
helper loads only the files that define it (QARepVGG block, conv blocks, up-sampling, YOLO-NAS
stages, PAN neck, NDFL heads, SPP, anchor helpers) from the installed source, and answers every
other ``super_gradients.*`` import (registries, factories, decorators, interfaces) with a
permissive stub. The network is then assembled from the reference's own classes exactly as its
``yolo_nas_{s,m,l}_arch_params.yaml`` describes (``NStageBackbone`` / ``YoloNASPANNeckWithC2`` /
``NDFLHeads`` wiring, BatchNorm eps and momentum from the yaml).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

PKG = "super_gradients"
_DET = f"{PKG}.training.models.detection_models"
_POSE = f"{PKG}.training.models.pose_estimation_models.yolo_nas_pose"
REAL = {
    f"{PKG}.modules.qarepvgg_block", f"{PKG}.modules.conv_bn_act_block", f"{PKG}.modules.conv_bn_relu_block",
    f"{PKG}.modules.sampling", f"{PKG}.modules.skip_connections", f"{PKG}.modules.utils",
    f"{PKG}.training.utils.bbox_utils", f"{PKG}.common.data_types.enum.upsample_mode",
    f"{_DET}.csp_darknet53", f"{_DET}.pp_yolo_e.pp_yolo_head", f"{_DET}.yolo_nas.yolo_stages",
    f"{_DET}.yolo_nas.dfl_heads", f"{_DET}.yolo_nas.panneck",
    f"{_POSE}.yolo_nas_pose_dfl_head", f"{_POSE}.yolo_nas_pose_ndfl_heads",
}
# names other modules import from stubbed packages: (module that really defines it, attribute)
REEXPORTS = {
    "UpsampleMode": f"{PKG}.common.data_types.enum.upsample_mode",
    "Residual": f"{PKG}.modules.skip_connections",
    "QARepVGGBlock": f"{PKG}.modules.qarepvgg_block",
    "Conv": f"{PKG}.modules.conv_bn_act_block",
    "ConvBNAct": f"{PKG}.modules.conv_bn_act_block",
    "ConvBNReLU": f"{PKG}.modules.conv_bn_relu_block",
    "width_multiplier": f"{PKG}.modules.utils",
    "autopad": f"{PKG}.modules.utils",
    "make_upsample_module_with_explicit_channels": f"{PKG}.modules.sampling",
    "batch_distance2bbox": f"{PKG}.training.utils.bbox_utils",
    "generate_anchors_for_grid_cell": f"{_DET}.pp_yolo_e.pp_yolo_head",
}


class _StubMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_Stub,), {})


class _Stub(metaclass=_StubMeta):
    """A class for any stubbed name: usable as a base, a type hint, a factory and a decorator."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, fn: Any = None, *args: Any, **kwargs: Any) -> Any:
        return fn


class BaseDetectionModule(nn.Module):
    def __init__(self, in_channels: Any, **kwargs: Any) -> None:
        super().__init__()
        self.in_channels = in_channels


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full in REAL:
            return importlib.import_module(full)
        if name == "BaseDetectionModule":
            return BaseDetectionModule
        if name == "torch_version_is_greater_or_equal":
            return lambda major, minor: True
        if name in REEXPORTS:
            return getattr(importlib.import_module(REEXPORTS[name]), name)
        return _StubMeta(name, (_Stub,), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname in REAL:
            return importlib.util.spec_from_file_location(fullname, self.root / (fullname.replace(".", "/") + ".py"))
        if fullname == PKG or fullname.startswith(PKG + "."):
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def source_root() -> Path | None:
    """The folder holding an installed ``super_gradients`` source tree (not imported), or None."""
    spec = importlib.util.find_spec(PKG) if PKG not in sys.modules else None
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent.parent
    return root if (root / PKG / "training/models/detection_models/yolo_nas/yolo_stages.py").is_file() else None


@contextmanager
def loaded(root: Path) -> Iterator[dict[str, types.ModuleType]]:
    """The reference's YOLO-NAS (and YOLO-NAS-Pose head) modules; ``sys.modules`` and the import
    path are restored after."""
    finder = _Finder(root)
    saved = {k: v for k, v in sys.modules.items() if k == PKG or k.startswith(PKG + ".") or k == "omegaconf"}
    omegaconf = types.ModuleType("omegaconf")
    omegaconf.DictConfig = type("DictConfig", (), {})  # type: ignore[attr-defined]
    had_omegaconf = "omegaconf" in sys.modules
    if not had_omegaconf:
        sys.modules["omegaconf"] = omegaconf
    sys.meta_path.insert(0, finder)
    try:
        yield {n: importlib.import_module(f"{_DET}.{p}") for n, p in
               (("stages", "yolo_nas.yolo_stages"), ("heads", "yolo_nas.dfl_heads"), ("neck", "yolo_nas.panneck"),
                ("csp", "csp_darknet53"))} | {
            n: importlib.import_module(f"{_POSE}.{p}") for n, p in
            (("pose_head", "yolo_nas_pose_dfl_head"), ("pose_heads", "yolo_nas_pose_ndfl_heads"))}
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if k == PKG or k.startswith(PKG + ".") or k == "omegaconf"]:
            del sys.modules[k]
        sys.modules.update(saved)


def _one(d: dict) -> dict:
    ((_, v),) = d.items()
    return dict(v or {})


class _Backbone(nn.Module):
    """``NStageBackbone`` wiring (stem, stage1..4, context module; outputs of ``out_layers``)."""

    def __init__(self, cfg: dict, mods: dict) -> None:
        super().__init__()
        st = mods["stages"]
        self.stem = st.YoloNASStem(3, **_one(cfg["stem"]))
        c = self.stem.out_channels
        for i, s in enumerate(cfg["stages"], 1):
            m = st.YoloNASStage(c, **{**_one(s), "activation_type": nn.ReLU})
            setattr(self, f"stage{i}", m)
            c = m.out_channels
        self.context_module = mods["csp"].SPP(c, **{**_one(cfg["context_module"]), "activation_type": nn.ReLU})
        self.out_layers = list(cfg["out_layers"])
        self.out_channels = [getattr(self, n).out_channels for n in self.out_layers]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outs = []
        for n in ("stem", "stage1", "stage2", "stage3", "stage4", "context_module"):
            x = getattr(self, n)(x)
            if n in self.out_layers:
                outs.append(x)
        return outs


def _trunk(cfg: dict, mods: dict) -> tuple[nn.Module, nn.Module, list[int]]:
    """``NStageBackbone`` + ``YoloNASPANNeckWithC2`` from an arch-params yaml, and the neck's output widths."""
    st = mods["stages"]
    backbone = _Backbone(cfg["backbone"]["NStageBackbone"], mods)
    c2, c3, c4, c5 = backbone.out_channels
    ncfg = cfg["neck"]["YoloNASPANNeckWithC2"]
    neck = mods["neck"].YoloNASPANNeckWithC2.__new__(mods["neck"].YoloNASPANNeckWithC2)
    nn.Module.__init__(neck)  # its own __init__ goes through the (stubbed) module factory

    def stage(cls: type, key: str, ins: list[int]) -> nn.Module:
        return cls(ins, **{**_one(ncfg[key]), "activation_type": nn.ReLU})

    neck.neck1 = stage(st.YoloNASUpStage, "neck1", [c5, c4, c3])
    neck.neck2 = stage(st.YoloNASUpStage, "neck2", [neck.neck1.out_channels[1], c3, c2])
    neck.neck3 = stage(st.YoloNASDownStage, "neck3", [neck.neck2.out_channels[1], neck.neck2.out_channels[0]])
    neck.neck4 = stage(st.YoloNASDownStage, "neck4", [neck.neck3.out_channels, neck.neck1.out_channels[0]])
    return backbone, neck, [neck.neck2.out_channels[1], neck.neck3.out_channels, neck.neck4.out_channels]


def _set_bn(model: nn.Module, cfg: dict) -> None:
    for m in model.modules():  # CustomizableDetector._initialize_weights
        if type(m) is nn.BatchNorm2d:
            m.eps, m.momentum = float(cfg["bn_eps"]), float(cfg["bn_momentum"])


class Reference(nn.Module):
    """forward(x) -> the reference ``NDFLHeads`` output: ((pred_bboxes [B, A, 4] xyxy pixels,
    pred_scores [B, A, C]), (cls logits [B, A, C], reg logits [B, A, 4 * 17], ...))."""

    def __init__(self, root: Path, mods: dict, size: str, nc: int) -> None:
        super().__init__()
        import yaml

        cfg = yaml.safe_load((root / PKG / f"recipes/arch_params/yolo_nas_{size}_arch_params.yaml").read_text())
        dh = mods["heads"]
        self.backbone, self.neck, outs = _trunk(cfg, mods)
        hcfg = cfg["heads"]["NDFLHeads"]
        heads = dh.NDFLHeads.__new__(dh.NDFLHeads)
        nn.Module.__init__(heads)
        r = int(hcfg["reg_max"])
        heads.num_classes, heads.reg_max, heads.grid_cell_scale, heads.grid_cell_offset = nc, r, 5.0, 0.5
        heads.eval_size = None
        heads.register_buffer("proj_conv", torch.linspace(0, r, r + 1).reshape([1, r + 1, 1, 1]), persistent=False)
        strides = []
        for i, h in enumerate(hcfg["heads_list"]):
            m = dh.YoloNASDFLHead(outs[i], num_classes=nc, reg_max=r, **_one(h))
            setattr(heads, f"head{i + 1}", m)
            strides.append(m.stride)
        heads.num_heads, heads.fpn_strides = len(strides), tuple(strides)
        self.heads = heads
        _set_bn(self, cfg)

    def forward(self, x: torch.Tensor) -> Any:
        return self.heads(self.neck(self.backbone(x)))


class PoseReference(nn.Module):
    """super-gradients' YOLO-NAS-Pose from ``yolo_nas_pose_{n,s,m,l}_arch_params.yaml``: the trunk
    as :class:`Reference`, ``YoloNASPoseNDFLHeads`` of ``YoloNASPoseDFLHead``. forward(x) -> the
    reference head output: ((pred_bboxes [B, A, 4], pred_scores [B, A, 1], pred_pose_coords
    [B, A, K, 2] pixels, pred_pose_scores [B, A, K]), (cls logits [B, A, 1], reg logits
    [B, A, 68], pose coords [B, A, K, 2], pose logits [B, A, K], ...))."""

    def __init__(self, root: Path, mods: dict, size: str) -> None:
        super().__init__()
        import yaml

        cfg = yaml.safe_load((root / PKG / f"recipes/arch_params/yolo_nas_pose_{size}_arch_params.yaml").read_text())
        self.backbone, self.neck, outs = _trunk(cfg, mods)
        hcfg = dict(cfg["heads"]["YoloNASPoseNDFLHeads"])
        cls = mods["pose_heads"].YoloNASPoseNDFLHeads
        heads = cls.__new__(cls)
        nn.Module.__init__(heads)
        r, k = int(hcfg["reg_max"]), int(hcfg["num_classes"])
        heads.in_channels, heads.num_classes, heads.reg_max = tuple(outs), k, r
        heads.grid_cell_scale, heads.grid_cell_offset, heads.eval_size = 5.0, 0.5, None
        heads.pose_offset_multiplier = float(hcfg.get("pose_offset_multiplier", 1.0))
        heads.compensate_grid_cell_offset = bool(hcfg.get("compensate_grid_cell_offset", True))
        heads.inference_mode = False
        heads.register_buffer("proj_conv", torch.linspace(0, r, r + 1).reshape([1, r + 1, 1, 1]), persistent=False)
        strides = []
        for i, h in enumerate(hcfg["heads_list"]):
            m = mods["pose_head"].YoloNASPoseDFLHead(outs[i], **{**_one(h), "num_classes": k, "reg_max": r})
            setattr(heads, f"head{i + 1}", m)
            strides.append(m.stride)
        heads.num_heads, heads.fpn_strides = len(strides), tuple(strides)
        self.heads = heads
        _set_bn(self, cfg)

    def forward(self, x: torch.Tensor) -> Any:
        return self.heads(self.neck(self.backbone(x)))

"""Contract suite: every registered family, picked up automatically, honours the shared rules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from libreyolo.model import Model
from libreyolo.registry import families, parse_weights_name

PKG = Path(__file__).resolve().parents[2] / "libreyolo"
FAMS = sorted(families().items())
KNOWN_TASKS = {"detect", "classify", "segment", "pose", "semantic", "depth", "point", "restore", "prompt", "matte",
               "ocr"}


@pytest.mark.parametrize("name,fam", FAMS, ids=[n for n, _ in FAMS])
def test_class_declarations(name: str, fam: type) -> None:
    assert fam.FAMILY == name and fam.NAME_TOKEN and fam.SIZES
    assert set(fam.TASKS) <= KNOWN_TASKS
    if not fam.SUPPORTS_CUDA_GRAPH:
        assert fam.CUDA_GRAPH_REASON.strip(), "a False flag carries a one-line reason"
    if not fam.SUPPORTS_TRAIN_CUDA_GRAPH:
        assert fam.TRAIN_CUDA_GRAPH_REASON.strip()
    suffix = {"detect": "", "classify": "-cls", "segment": "-seg", "pose": "-pose", "semantic": "-sem", "depth": "-depth",
              "point": "-point", "restore": "-restore", "prompt": "-prompt", "matte": "-matte",
              "ocr": "-ocr"}
    for size in fam.SIZES:
        assert parse_weights_name(f"Libre{fam.NAME_TOKEN}{size}.pt").family == name
        for task in fam.TASKS:
            parsed = parse_weights_name(f"Libre{fam.NAME_TOKEN}{size}{suffix[task]}.pt")
            assert (parsed.family, parsed.size, parsed.task) == (name, size, task)


@pytest.mark.parametrize("name,fam", FAMS, ids=[n for n, _ in FAMS])
def test_smallest_size_forward_postprocess_and_output_names(name: str, fam: type) -> None:
    torch.manual_seed(0)
    model = Model(fam(size=fam.SIZES[0], nc=3))
    x = torch.rand(1, 3, 64, 64)
    raw = model.eager_forward(x)
    outs = raw if isinstance(raw, (list, tuple)) else [raw]
    assert all(torch.isfinite(o).all() for o in outs)
    if fam.OUTPUT_NAMES and fam.OUTPUT_KIND != "ocr":  # ocr: OUTPUT_NAMES name the exported detector alone
        assert len(fam.OUTPUT_NAMES) == len(outs)
    dets = model.postprocess(raw, conf=0.0, iou=0.7, classes=None, max_det=10, agnostic=False)
    assert fam.OUTPUT_KIND in {"boxes", "probs", "semantic", "depth", "points", "restore", "masks", "keypoints",
                               "prompt", "matte", "ocr"}
    if fam.OUTPUT_KIND == "ocr":  # text: the detector's map at the input size, then regions + strings per image
        assert outs[0].shape == (1, 1, 64, 64) and len(outs) == 6 and outs[4].ndim == 3 and outs[5].ndim == 2
        assert len(dets) == 1 and dets[0]["polygons"].shape[1:] == (4, 2)
        assert len(dets[0]["texts"]) == len(dets[0]["polygons"]) == len(dets[0]["scores"]) == len(dets[0]["angles"])
    elif fam.OUTPUT_KIND == "prompt":  # promptable: the default prompt's mask logits at the input size + its IoU score
        assert outs[0].ndim == 5 and outs[0].shape[:3] == (1, 1, 1) and model.nc == 1
        assert len(dets) == 1 and dets[0]["masks"].shape == (1, 64, 64) and dets[0]["scores"].shape == (1,)
    elif fam.OUTPUT_KIND == "depth":  # per image Tensor[h, w] float32 at the input's stride multiple (no classes)
        s = 64 // fam.STRIDE * fam.STRIDE
        assert outs[0].shape == (1, 1, s, s) and model.nc == 1
        assert len(dets) == 1 and dets[0].shape == (s, s) and dets[0].dtype == torch.float32
    elif fam.OUTPUT_KIND == "matte":  # matte logits at the input size -> per image alpha Tensor[h, w] in [0, 1]
        assert outs[0].shape == (1, 1, 64, 64) and model.nc == 1
        assert len(dets) == 1 and dets[0].shape == (64, 64) and 0 <= float(dets[0].min()) <= float(dets[0].max()) <= 1
    elif fam.OUTPUT_KIND == "restore":  # per image the restored Tensor[3, s*H, s*W] in [0, 1], no classes
        s = fam.SCALE
        assert outs[0].shape == (1, 3, 64 * s, 64 * s) and model.nc == 1
        assert len(dets) == 1 and dets[0].shape == (3, 64 * s, 64 * s) and 0 <= float(dets[0].min())
        assert float(dets[0].max()) <= 1
    elif fam.OUTPUT_KIND == "semantic":  # per image logits Tensor[nc, h, w] at a fraction of the input's stride multiple
        s = 64 // fam.STRIDE * fam.STRIDE
        assert outs[0].ndim == 4 and outs[0].shape[:2] == (1, 3) and s % outs[0].shape[2] == 0
        assert len(dets) == 1 and dets[0].shape == outs[0].shape[1:] and dets[0].dtype == torch.float32
    elif fam.OUTPUT_KIND == "points":  # per-cell logits (nc + 1, background first) -> per image (x, y, conf, cls)
        assert outs[0].ndim == 4 and outs[0].shape[:2] == (1, 4) and 64 % outs[0].shape[2] == 0
        assert len(dets) == 1 and dets[0].ndim == 2 and dets[0].shape[1] == 4 and dets[0].shape[0] <= 10
        assert ((dets[0][:, 3] >= 0) & (dets[0][:, 3] < 3)).all() and ((dets[0][:, :2] >= 0) & (dets[0][:, :2] <= 64)).all()
    elif fam.OUTPUT_KIND == "probs":  # classification: per image Tensor[nc] of probabilities
        assert outs[0].shape == (1, 3)
        assert len(dets) == 1 and dets[0].shape == (3,)
        assert torch.allclose(dets[0].sum(), torch.tensor(1.0), atol=1e-5) and (dets[0] >= 0).all()
    elif fam.OUTPUT_KIND == "masks":  # instance segmentation: boxes + mask parameters, mask features last
        # prototype families (stride 4, nm coefficients per box) by default; others declare their layout
        s = getattr(fam, "MASK_FEAT_STRIDE", 4)
        cols = getattr(fam, "MASK_DET_COLUMNS", outs[-1].shape[1])
        assert outs[-1].ndim == 4 and tuple(outs[-1].shape[2:]) == (64 // s, 64 // s)
        assert len(dets) == 1 and dets[0].ndim == 2 and dets[0].shape[1] == 6 + cols and dets[0].shape[0] <= 10
        masks = model.family.masks(outs[-1][0], dets[0], input_hw=(64, 64))  # always at a quarter of the input
        assert masks.shape == (len(dets[0]), 16, 16) and bool(((masks >= 0) & (masks <= 1)).all())
    elif fam.OUTPUT_KIND == "keypoints":  # pose: boxes + nkpt keypoints (x, y, visibility score) each
        k = int(model.nkpt)
        assert len(dets) == 1 and dets[0].ndim == 2 and dets[0].shape[1] == 6 + 3 * k and dets[0].shape[0] <= 10
        assert bool(((dets[0][:, 8::3] >= 0) & (dets[0][:, 8::3] <= 1)).all())
    else:
        assert len(dets) == 1 and dets[0].ndim == 2 and dets[0].shape[1] == 6 and dets[0].shape[0] <= 10


def _family_dirs() -> list[Path]:
    return sorted(p for p in (PKG / "models").iterdir() if p.is_dir() and not p.name.startswith("_"))


def test_no_code_outside_a_family_folder_names_a_family() -> None:
    """DESIGN convention 1: shared code asks capabilities, it never tests family names."""
    names = [n for n, _ in FAMS]
    alt = "|".join(names)
    pattern = re.compile(rf"""(==|!=|\bin\b)\s*["']({alt})["']|["']({alt})["']\s*(==|!=)""")
    offenders = []
    for py in PKG.rglob("*.py"):
        rel = py.relative_to(PKG)
        if rel.parts[0] == "models" and len(rel.parts) > 2 and rel.parts[1] in names:
            continue
        if pattern.search(py.read_text()):
            offenders.append(str(rel))
    assert offenders == []


def test_family_folders_import_no_other_family() -> None:
    folders = {p.name for p in _family_dirs()}
    offenders = []
    for folder in _family_dirs():
        for py in folder.rglob("*.py"):
            tree = ast.parse(py.read_text())
            for node in ast.walk(tree):
                mods = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    mods = [("." * node.level) + node.module]
                elif isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                for m in mods:
                    for other in folders - {folder.name}:
                        if re.search(rf"(^|\.)models\.{other}(\.|$)|^\.\.{other}(\.|$)", m):
                            offenders.append(f"{py.relative_to(PKG)} imports {m}")
    assert offenders == []

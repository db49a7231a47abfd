"""D-FINE against the original code (Peterande/D-FINE ``src/``), when a checkout of it is named by
``LIBREYOLO_DFINE_REPO`` (it is a repository, not a package, so CI skips this file; the offline layout
tests are ``test_dfine_release.py``). The reference network is built from its modules with the n / s
configs (``configs/dfine/dfine_hgnetv2_{n,s}_coco.yml``, no pretrained download), given random
BatchNorm statistics and non-zero heads, saved as a release file (``{"model", "ema": {"module"}}``),
read back through the release reader and converter, and both networks run in eval mode on the same
image with every token a query; the backbone maps are compared, and logits and boxes per query after
pairing the queries up.

Result (run here against commit 4a1f73a): n and s equal within 1e-5 relative (logits 2e-6 absolute),
once the backbone BatchNorm eps (1e-5 there, 1e-3 here) is folded by the converter."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

from libreyolo.convert import convert_foreign, read_foreign
from libreyolo.models._detr.dfine_net import DFineDetector

REPO = os.environ.get("LIBREYOLO_DFINE_REPO", "")
pytestmark = pytest.mark.skipif(not (REPO and (Path(REPO) / "src" / "zoo" / "dfine" / "dfine_decoder.py").is_file()),
                                reason="LIBREYOLO_DFINE_REPO does not name a Peterande/D-FINE checkout")
H, W = 96, 128
MODULES = ("nn/backbone/common", "nn/backbone/hgnetv2", "zoo/dfine/utils", "zoo/dfine/box_ops", "zoo/dfine/dfine_utils",
           "zoo/dfine/denoising", "zoo/dfine/hybrid_encoder", "zoo/dfine/dfine_decoder", "zoo/dfine/dfine")


@pytest.fixture(autouse=True)
def _portable_attention(monkeypatch: pytest.MonkeyPatch):
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    registry.clear_cache()
    yield
    registry.clear_cache()


@pytest.fixture(scope="module")
def ref_modules():
    """The reference's network modules, loaded one by one under a stub ``src`` package (its package
    ``__init__`` files import the data, solver and training code, which need more packages)."""
    saved = dict(sys.modules)
    root = Path(REPO) / "src"
    for name in ("src", "src.core", "src.nn", "src.nn.backbone", "src.zoo", "src.zoo.dfine"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        sys.modules[name] = pkg
    sys.modules["src.core"].register = lambda *a, **k: (lambda cls: cls)
    loaded = {}
    try:
        for rel in MODULES:
            name = "src." + rel.replace("/", ".")
            spec = importlib.util.spec_from_file_location(name, root / f"{rel}.py")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            loaded[rel.rsplit("/", 1)[1]] = mod
        yield loaded
    finally:
        for name in [n for n in sys.modules if n not in saved]:
            del sys.modules[name]


def _reference(m: dict, size: str, tokens: int) -> torch.nn.Module:
    n = size == "n"
    backbone = m["hgnetv2"].HGNetv2("B0", use_lab=True, return_idx=[2, 3] if n else [1, 2, 3], freeze_at=-1,
                                    freeze_norm=False, pretrained=False)
    feats, strides = ([512, 1024], [16, 32]) if n else ([256, 512, 1024], [8, 16, 32])
    hidden, ffn = (128, 512) if n else (256, 1024)
    encoder = m["hybrid_encoder"].HybridEncoder(
        in_channels=feats, feat_strides=strides, hidden_dim=hidden, use_encoder_idx=[len(feats) - 1],
        dim_feedforward=ffn, expansion=0.34 if n else 0.5, depth_mult=0.5 if n else 0.34, enc_act="gelu", act="silu")
    decoder = m["dfine_decoder"].DFINETransformer(
        feat_channels=[hidden] * len(feats), feat_strides=list(strides), hidden_dim=hidden, dim_feedforward=ffn,
        num_levels=len(feats), num_layers=3, eval_idx=-1, num_points=[6, 6] if n else [3, 6, 3], reg_max=32,
        reg_scale=4, num_queries=tokens)
    return m["dfine"].DFINE(backbone, encoder, decoder)


@pytest.mark.parametrize("size", ["n", "s"])
def test_outputs_equal_original(size: str, ref_modules: dict, tmp_path: Path) -> None:
    levels = 2 if size == "n" else 3
    tokens = sum((H // s) * (W // s) for s in (8, 16, 32)[3 - levels:])
    torch.manual_seed(0)
    ref = _reference(ref_modules, size, tokens).eval()
    randomize_norms(ref)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # the heads and gates the reference zero-initialises
        for name, p in ref.named_parameters():
            if p.dim() == 2 and ("bbox_head" in name or "reg_conf" in name or "gateway.gate" in name):
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    path = tmp_path / f"dfine_{size}_coco.pth"
    sd = ref.state_dict()
    torch.save({"model": {k: torch.zeros_like(v) for k, v in sd.items()}, "ema": {"module": sd, "updates": 1}}, path)
    model = convert_foreign(read_foreign(path))
    assert (model.FAMILY, model.size, model.nc) == ("dfine", size, 80)
    net = DFineDetector(cfg=dataclasses.replace(model.net.cfg, num_queries=tokens), nc=80)
    net.load_state_dict(model.net.state_dict())
    x = torch.rand(1, 3, H, W, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = ref(x)
        lo, bo = net.eval()(x)
        for i, (ours, theirs) in enumerate(zip(net.backbone(x), ref.backbone(x), strict=True)):
            # the maps show a BatchNorm eps mismatch (1e-3 relative) that the normalised outputs dampen
            assert_rel_close(ours, theirs, what=f"backbone map {i}")
    cx, cy, bw, bh = out["pred_boxes"].unbind(-1)
    br = torch.stack([(cx - bw / 2) * W, (cy - bh / 2) * H, (cx + bw / 2) * W, (cy + bh / 2) * H], -1)
    assert lo.shape == out["pred_logits"].shape and bo.shape == br.shape
    j = torch.cdist(torch.cat([lo, bo / W], -1)[0], torch.cat([out["pred_logits"], br / W], -1)[0]).argmin(1)
    assert len(set(j.tolist())) == tokens, "queries do not pair up one to one"
    assert_rel_close(lo[0], out["pred_logits"][0, j], what="logits")
    assert_rel_close(bo[0], br[0, j], what="boxes")

"""YOLOX against the official ``yolox`` package (issue 18), when it is installed: the reference is
built as its ``exps`` build it (``YOLOPAFPN`` + ``YOLOXHead``, BatchNorm eps 1e-3 / momentum 0.03),
with a fixed seed and random BatchNorm statistics, saved as its trainer saves (``{"model": ...}``),
loaded by path, and both run in eval mode on the same input.

The package's only release (0.3.0) is a source package that compiles a C++ extension at install and
fails in an isolated build, so it is not in the ``ref`` test extra: CI skips this file (docs/weights.md).
It was run here with ``pip install --no-build-isolation --no-deps yolox==0.3.0 loguru``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

yolox = pytest.importorskip("yolox")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.models.yolox.variants import VARIANTS  # noqa: E402


def _reference(size: str, nc: int = 80):
    from yolox.models import YOLOPAFPN, YOLOX, YOLOXHead

    v = VARIANTS[size]
    torch.manual_seed(0)
    chans = [256, 512, 1024]
    ref = YOLOX(YOLOPAFPN(v.depth, v.width, in_channels=chans, depthwise=v.depthwise),
                YOLOXHead(nc, v.width, in_channels=chans, depthwise=v.depthwise))
    for m in ref.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.eps, m.momentum = 1e-3, 0.03
    randomize_norms(ref)
    ref.head.decode_in_inference = False
    return ref.eval()


@pytest.mark.parametrize("size", list(VARIANTS))
def test_outputs_equal_official_yolox(size: str, tmp_path: Path) -> None:
    ref = _reference(size)
    path = tmp_path / f"yolox_{size}.pth"
    torch.save({"start_epoch": 300, "model": ref.state_dict(), "optimizer": {}}, path)
    model = LibreYOLO(str(path))
    assert (model.FAMILY, model.size, model.nc) == ("yolox", size, 80)
    x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(x)  # (B, A, 5 + nc): raw box, sigmoid objectness and class scores
        raw = model.net.eval()(x)
    got = torch.cat([r.flatten(2) for r in raw], 2).permute(0, 2, 1)  # (B, A, 5 + nc) raw logits
    got = torch.cat([got[..., :4], got[..., 4:].sigmoid()], -1)
    assert_rel_close(got, want, what=f"yolox-{size}")

"""A quantized model's checkpoint reloads into the same quantized structure."""

from __future__ import annotations

import torch

from libreyolo import LibreYOLO


def test_quantized_checkpoint_round_trip(tmp_path) -> None:
    torch.manual_seed(0)
    m = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2)
    x = torch.rand(2, 3, 64, 64)
    m.quantize(recipe="int8", calibrate=[x], finalize=False)
    p = m.save(tmp_path / "q.pt")
    m2 = LibreYOLO(str(p))
    assert m2.quant_info()["recipe"] == "int8"
    with torch.no_grad():
        a, b = m.net.eval()(x), m2.net.eval()(x)
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))

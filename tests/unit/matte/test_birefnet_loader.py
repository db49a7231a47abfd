"""A reference BiRefNet checkpoint (its key layout: ``bb.*`` backbone, ``relative_position_bias_table``
and ``relative_position_index`` entries, optional ``module.`` prefix) loads through
``LibreYOLO(path)`` as ``.pth`` and ``.safetensors``, with one log line and the size from the keys."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.convert import detect_format
from libreyolo.errors import CheckpointError
from libreyolo.models.birefnet import convert as birefnet_convert
from libreyolo.models.birefnet.family import BiRefNet


def _reference_state_dict(size: str, *, prefix: str = "") -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(our state dict, the same tensors under the reference's names, perturbed so a load is visible)."""
    torch.manual_seed(0)
    own = BiRefNet(size=size).net.state_dict()
    ref: dict[str, torch.Tensor] = {}
    for k, v in own.items():
        name = k.replace("encoder.bb.", "bb.").replace("rel_pos_bias.table", "relative_position_bias_table")
        ref[prefix + name] = (v + 0.01 * torch.randn_like(v)) if v.is_floating_point() else v.clone()
        if name.endswith("relative_position_bias_table"):  # the reference stores the index too (dropped)
            ref[prefix + name.replace("bias_table", "index")] = torch.zeros(4, 4, dtype=torch.long)
    return own, ref


@pytest.fixture
def tiny_is_a_width(monkeypatch):
    """The tiny test size (backbone width 8) read as a released size, so that the file stays small."""
    monkeypatch.setitem(birefnet_convert.WIDTH_TO_SIZE, 8, "tiny")


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_reference_checkpoint_loads_through_libreyolo(tmp_path: Path, tiny_is_a_width, caplog, suffix: str) -> None:
    _, ref = _reference_state_dict("tiny", prefix="module." if suffix == ".pth" else "")
    path = tmp_path / f"BiRefNet-tiny{suffix}"
    if suffix == ".pth":
        torch.save(ref, path)
    else:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in ref.items()}, str(path))
    assert detect_format(path) == "birefnet"
    with caplog.at_level(logging.INFO, logger="libreyolo.convert"):
        model = LibreYOLO(str(path))
    lines = [r for r in caplog.records if r.name == "libreyolo.convert" and "converted" in r.getMessage()]
    assert len(lines) == 1 and "birefnet" in lines[0].getMessage(), [r.getMessage() for r in caplog.records]
    assert (model.FAMILY, model.size, model.task) == ("birefnet", "tiny", "matte")
    got = model.net.state_dict()
    key = "bb.layers.0.blocks.0.attn.relative_position_bias_table"
    key = next(k for k in ref if k.endswith(key))
    assert torch.equal(got["encoder.bb.layers.0.blocks.0.attn.rel_pos_bias.table"], ref[key])
    assert torch.equal(got["decoder.conv_out1.0.weight"], ref[key.split("bb.")[0] + "decoder.conv_out1.0.weight"])


def test_unknown_width_and_non_birefnet_files(tmp_path: Path) -> None:
    _, ref = _reference_state_dict("tiny")  # width 8 is no released size without the fixture
    path = tmp_path / "w.pth"
    torch.save(ref, path)
    with pytest.raises(CheckpointError, match="width 8"):
        LibreYOLO(str(path))
    other = tmp_path / "other.pth"
    torch.save({"decoder.x": torch.zeros(1), "conv.weight": torch.zeros(1)}, other)
    assert detect_format(other) is None

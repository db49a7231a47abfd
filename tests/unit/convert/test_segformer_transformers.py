"""SegFormer against transformers' ``SegformerForSemanticSegmentation`` (issue 22): the reference is
built from a config with a fixed seed (no download), its decode-head BatchNorm given random
statistics, converted (in memory: transformers 5 key names; through ``save_pretrained``: the Hub's
older names) and run in eval mode on the same input; logits must agree within 1e-5 relative
(fp32). Our network standardises its [0, 1] input itself (ImageNet mean / std)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

transformers = pytest.importorskip("transformers")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.convert import ForeignWeights, convert_foreign, detect_format  # noqa: E402
from libreyolo.errors import CheckpointError  # noqa: E402
from libreyolo.layers.classify import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from libreyolo.models.segformer.family import SegFormer  # noqa: E402

WIDTHS = {"b0": [32, 64, 160, 256], "b1": [64, 128, 320, 512]}
PUBLISHED_M = {"b0": 3.8, "b1": 13.7}  # paper, ADE20K (150 classes), millions of parameters


def _reference(size: str, nc: int = 150):
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    torch.manual_seed(0)
    cfg = SegformerConfig(hidden_sizes=WIDTHS[size], depths=[2, 2, 2, 2], decoder_hidden_size=256, num_labels=nc)
    ref = SegformerForSemanticSegmentation(cfg).eval()
    randomize_norms(ref)
    return ref


def _compare(net: torch.nn.Module, ref, *, hw: tuple[int, int] = (96, 128)) -> None:
    x = torch.rand(2, 3, *hw, generator=torch.Generator().manual_seed(5))
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        want = ref(pixel_values=(x - mean) / std).logits
        got = net.eval()(x)
    assert_rel_close(got, want, what="logits")


@pytest.mark.parametrize("size", ["b0", "b1"])
def test_logits_equal_transformers(size: str) -> None:
    ref = _reference(size)
    model = convert_foreign(ForeignWeights(source="transformers", arch="segformer", state_dict=ref.state_dict(),
                                           path="<memory>"))
    assert (model.FAMILY, model.size, model.nc, model.task) == ("segformer", size, 150, "semantic")
    _compare(model.net, ref)
    model.fuse()  # BatchNorm folded into the fuse convolution: the same function
    _compare(model.net, ref)


@pytest.mark.parametrize("size", ["b0", "b1"])
def test_parameter_count_matches_the_paper_and_the_reference(size: str) -> None:
    ours = sum(p.numel() for p in SegFormer(size=size, nc=150).net.parameters())
    assert ours == sum(p.numel() for p in _reference(size).parameters())
    assert abs(ours / 1e6 - PUBLISHED_M[size]) / PUBLISHED_M[size] < 0.03, ours


def test_hub_folder_loads_and_misfit_is_named(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    ref = _reference("b0", nc=5)
    folder = tmp_path / "segformer-b0"
    ref.save_pretrained(str(folder))  # the Hub layout (older key names): config.json + model.safetensors
    assert detect_format(folder / "model.safetensors") == "transformers"
    model = LibreYOLO(str(folder / "model.safetensors"))
    assert (model.FAMILY, model.size, model.nc, model.task) == ("segformer", "b0", 5, "semantic")
    _compare(model.net, ref, hw=(64, 64))
    sd = {k: v.contiguous() for k, v in ref.state_dict().items()}
    sd["segformer.stages.1.blocks.0.mlp.fc1.weight"] = torch.zeros(3, 3)  # the wrong shape
    bad = tmp_path / "bad"
    bad.mkdir()
    save_file(sd, str(bad / "model.safetensors"))
    (bad / "config.json").write_text(json.dumps({"model_type": "segformer"}))
    with pytest.raises(CheckpointError, match=r"has shape \(3, 3\), ours .encoder\.stages\.1\.blocks\.0\.ffn\.fc1\.weight") as e:
        LibreYOLO(str(bad / "model.safetensors"))
    assert "\n" not in str(e.value)

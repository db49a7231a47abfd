"""``libreyolo convert src=... [model=...] out=...`` writes a native checkpoint that loads like
our own weights and computes what the reference computes (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

from libreyolo import LibreYOLO
from libreyolo.cli.main import entrypoint
from libreyolo.io.checkpoint import read_checkpoint
from libreyolo.layers.classify import IMAGENET_MEAN, IMAGENET_STD

timm = pytest.importorskip("timm")


@pytest.fixture(scope="module")
def timm_folder(tmp_path_factory: pytest.TempPathFactory):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    ref = timm.create_model("resnet18", pretrained=False, num_classes=5).eval()
    randomize_norms(ref)
    folder = tmp_path_factory.mktemp("timm-resnet18")
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architecture": "resnet18", "num_classes": 5}))
    return folder, ref


def test_convert_writes_a_native_checkpoint(timm_folder, tmp_path: Path, capsys) -> None:
    folder, ref = timm_folder
    out = tmp_path / "LibreResNet18-mine-cls.pt"
    code = entrypoint(["convert", f"src={folder}", "model=LibreResNet18-cls.pt", f"out={out}"])
    stdout = capsys.readouterr().out
    assert code == 0 and "resnet-18" in stdout and out.is_file()
    meta = read_checkpoint(out)["libreyolo"]  # weights_only=True: a plain libreyolo checkpoint
    assert (meta["family"], meta["size"], meta["nc"]) == ("resnet", "18", 5)
    model = LibreYOLO(str(out))
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(7))
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        assert_rel_close(model.net.eval()(x), ref((x - mean) / std), what="logits")


def test_convert_errors_are_one_line_with_exit_codes(timm_folder, tmp_path: Path, capsys) -> None:
    folder, _ = timm_folder
    assert entrypoint(["convert"]) == 2
    assert "needs src=" in capsys.readouterr().err
    assert entrypoint(["convert", f"src={tmp_path / 'nope.pt'}"]) == 3
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    assert entrypoint(["convert", f"src={folder}", "model=LibreResNet50-cls.pt", f"out={tmp_path / 'x.pt'}"]) == 3
    err = capsys.readouterr().err
    assert "resnet-18" in err and "Traceback" not in err and not (tmp_path / "x.pt").exists()
    plain = tmp_path / "plain.pt"
    torch.save({"w": torch.ones(1)}, plain)
    assert entrypoint(["convert", f"src={plain}"]) == 3
    assert "not a checkpoint format libreyolo can convert" in capsys.readouterr().err

"""Classifiers against timm (issue 18): each reference is built with a fixed seed and random
BatchNorm statistics, converted (tensor names checked, first misfit named), and both run in eval
mode on the same input; logits must agree within 1e-5 relative (fp32). Our networks standardise
their [0, 1] input themselves (ImageNet mean/std); timm takes the standardised batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _convert_helpers import assert_rel_close, randomize_norms

timm = pytest.importorskip("timm")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.convert import convert_foreign, detect_format, read_foreign  # noqa: E402
from libreyolo.errors import CheckpointError  # noqa: E402
from libreyolo.layers.classify import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402

# (our weights name, timm architecture, timm kwargs)
EXACT = [
    ("LibreResNet18-cls.pt", "resnet18", {}),
    ("LibreResNet50-cls.pt", "resnet50", {}),
    ("LibreConvNeXtatto-cls.pt", "convnext_atto", {}),
    ("LibreConvNeXttiny-cls.pt", "convnext_tiny", {}),
    ("LibreMobileNetV4conv_small-cls.pt", "mobilenetv4_conv_small", {}),
    ("LibreEfficientNetV2s-cls.pt", "efficientnetv2_s", {}),  # BatchNorm eps 1e-5 folded into ours (1e-3)
    # timm's B0 exists only as the TF port; with symmetric padding it is exactly our B0
    ("LibreEfficientNetV2b0-cls.pt", "tf_efficientnetv2_b0", {"pad_type": ""}),
]
TF_PADDING = ("timm's tf_ EfficientNetV2 pads stride-2 convs TF-'same' (asymmetric), ours symmetrically "
              "(docs/weights.md)")


def _reference(arch: str, kwargs: dict, nc: int = 1000):
    torch.manual_seed(0)
    ref = timm.create_model(arch, pretrained=False, num_classes=nc, **kwargs).eval()
    randomize_norms(ref)
    return ref


def _compare(ours_net, ref, *, hw: tuple[int, int] = (96, 128)) -> None:
    x = torch.rand(2, 3, *hw, generator=torch.Generator().manual_seed(5))
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        want = ref((x - mean) / std)
        got = ours_net.eval()(x)
    assert_rel_close(got, want, what="logits")


def _as_fw(ref, arch: str, path: str = "<memory>"):
    from libreyolo.convert import ForeignWeights

    return ForeignWeights(source="timm", arch=arch, state_dict=ref.state_dict(), path=path)


@pytest.mark.parametrize(("ours", "arch", "kwargs"), EXACT, ids=[e[1] for e in EXACT])
def test_logits_equal_timm(ours: str, arch: str, kwargs: dict) -> None:
    ref = _reference(arch, kwargs)
    model = convert_foreign(_as_fw(ref, arch))
    assert (model.FAMILY, model.size) == (LibreYOLO(ours, pretrained=False).FAMILY, LibreYOLO(ours, pretrained=False).size)
    _compare(model.net, ref)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=TF_PADDING)
@pytest.mark.parametrize("arch", ["tf_efficientnetv2_b0", "tf_efficientnetv2_s"])
def test_tf_padded_efficientnetv2_logits_equal_timm(arch: str) -> None:
    ref = _reference(arch, {})
    _compare(convert_foreign(_as_fw(ref, arch)).net, ref)


def _hub_folder(tmp: Path, ref, arch: str, *, names: list[str] | None = None) -> Path:
    from safetensors.torch import save_file

    tmp.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(tmp / "model.safetensors"))
    cfg = {"architecture": arch, "num_classes": ref.num_classes}
    if names:
        cfg["label_names"] = names
    (tmp / "config.json").write_text(json.dumps(cfg))
    return tmp


def test_libreyolo_loads_a_timm_hub_folder_and_predicts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A Hub snapshot folder (config.json + model.safetensors) loads by path, converted on load
    with one log line; predict() gives the softmax of the reference's logits."""
    ref = _reference("resnet18", {}, nc=3)
    folder = _hub_folder(tmp_path / "snap", ref, "resnet18.a1_in1k", names=["cat", "dog", "owl"])
    assert detect_format(folder / "model.safetensors") == "timm"
    with caplog.at_level("INFO", logger="libreyolo.convert"):
        model = LibreYOLO(str(folder))
    lines = [r for r in caplog.records if r.name == "libreyolo.convert"]
    assert len(lines) == 1 and "converted timm" in lines[0].getMessage()
    assert model.names == {0: "cat", 1: "dog", 2: "owl"}
    _compare(model.net, ref)
    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(6))
    probs = model.predict(x, imgsz=224)[0].probs.data
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        want = ref((x - mean) / std).softmax(-1)[0]
    assert_rel_close(probs.float().cpu(), want, rtol=1e-4, what="probs")  # predict() fuses Conv+BN


def test_misfit_names_the_first_key(tmp_path: Path) -> None:
    ref = _reference("resnet18", {})
    sd = ref.state_dict()
    sd["layer2.0.conv1.weight"] = torch.zeros(7, 7, 3, 3)
    folder = tmp_path / "bad"
    folder.mkdir()
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in sd.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architecture": "resnet18"}))
    with pytest.raises(CheckpointError, match=r"'layer2\.0\.conv1\.weight' has shape \(7, 7, 3, 3\)") as e:
        LibreYOLO(str(folder / "model.safetensors"))
    assert "\n" not in str(e.value)


def test_unknown_timm_architecture_is_one_line_error(tmp_path: Path) -> None:
    ref = _reference("resnet18", {})
    folder = _hub_folder(tmp_path / "vit", ref, "vit_tiny_patch16_224")
    with pytest.raises(CheckpointError, match="matches no libreyolo family") as e:
        LibreYOLO(str(folder))
    assert "\n" not in str(e.value)
    fw = read_foreign(folder / "model.safetensors")
    assert fw.arch == "vit_tiny_patch16_224"


def test_hub_repo_id_resolves_through_the_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``LibreYOLO("hf-hub:<repo>")``: the real huggingface_hub lookup against a local cache laid out
    as the Hub client writes it (offline), then converted like a local folder."""
    import huggingface_hub.constants as c

    ref = _reference("convnext_atto", {}, nc=4)
    cache = tmp_path / "hub"
    repo_dir = cache / "models--timm--convnext_atto.test"
    _hub_folder(repo_dir / "snapshots" / ("b" * 40), ref, "convnext_atto")
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text("b" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(cache))
    model = LibreYOLO("hf-hub:timm/convnext_atto.test")
    assert (model.FAMILY, model.size, model.nc) == ("convnext", "atto", 4)
    _compare(model.net, ref)
    with pytest.raises(CheckpointError) as e:
        LibreYOLO("hf-hub:timm/not_cached")
    msg = str(e.value)
    assert "\n" not in msg and "Hub cache" in msg and "HF_HUB_OFFLINE" in msg

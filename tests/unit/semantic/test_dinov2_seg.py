"""DINOv2 linear segmentation (``dinov2_seg``): sizes and counts, the published head + trunk files
through ``LibreYOLO(path)`` against timm's DINOv2 trunk with the head's arithmetic, and the user path
(weights name, predict, a few training steps, train -> val -> reload) on shapes-sem."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _steps import loss_history

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.data.shapes_sem import ensure_shapes_sem_dataset
from libreyolo.errors import CheckpointError
from libreyolo.kernels.attention import fused_attention_modules
from libreyolo.models.dinov2_seg.nn import SPECS, build_dinov2_seg
from libreyolo.registry import parse_weights_name

TRUNK = {"s14": 22_056_192, "b14": 86_579_712, "l14": 304_367_616}  # timm 1.0 vit_*_patch14_dinov2, num_classes=0 (meta device)


@pytest.mark.parametrize("size", sorted(SPECS))
def test_counts_are_the_trunk_plus_batchnorm_and_a_1x1_conv(size: str) -> None:
    with torch.device("meta"):
        net = build_dinov2_seg(size=size, nc=150)
    spec = SPECS[size]
    c = spec.vit.dim * spec.layers
    assert sum(p.numel() for p in net.backbone.parameters()) == TRUNK[size[:3]]
    assert sum(p.numel() for p in net.head.parameters()) == 2 * c + c * 150 + 150
    assert net.backbone.taps == tuple(range(spec.vit.depth - spec.layers, spec.vit.depth))


def _reference_files(tmp_path: Path, *, layers: int, nc: int) -> tuple[Path, object, dict]:
    """timm's DINOv2 ViT-S/14 with perturbed weights saved as the published trunk file, and a
    random head saved as mmsegmentation saves the published head files."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    ref = timm.create_model("vit_small_patch14_dinov2", pretrained=False, num_classes=0).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():  # a fresh init's zeros / ones would hide swapped tensors
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    c = 384 * layers
    head = {"decode_head.bn.weight": torch.rand(c, generator=g) + 0.5, "decode_head.bn.bias": torch.randn(c, generator=g),
            "decode_head.bn.running_mean": torch.randn(c, generator=g),
            "decode_head.bn.running_var": torch.rand(c, generator=g) + 0.5,
            "decode_head.bn.num_batches_tracked": torch.tensor(1000),
            "decode_head.conv_seg.weight": torch.randn(nc, c, 1, 1, generator=g) * 0.05,
            "decode_head.conv_seg.bias": torch.randn(nc, generator=g)}
    kind = "ms" if layers == 4 else "linear"
    torch.save(ref.state_dict(), tmp_path / "dinov2_vits14_pretrain.pth")
    path = tmp_path / f"dinov2_vits14_voc2012_{kind}_head.pth"
    torch.save({"meta": {"CLASSES": [f"c{i}" for i in range(nc)]}, "state_dict": head}, path)
    return path, ref, head


@pytest.mark.parametrize("layers", [1, 4])
def test_published_head_and_trunk_files_equal_the_reference_arithmetic(tmp_path: Path, layers: int) -> None:
    path, ref, head = _reference_files(tmp_path, layers=layers, nc=21)
    model = LibreYOLO(str(path))
    assert (model.FAMILY, model.size, model.nc, model.task) == ("dinov2_seg", "s14ms" if layers == 4 else "s14", 21,
                                                                "semantic")
    assert model.names[20] == "c20"
    # the trunk's own 37 x 37 grid: timm resamples the position embedding with antialiasing, the
    # DINOv2 reference and libreyolo without (resampled grids: tests/unit/classify/test_dinov2.py)
    x = torch.rand(1, 3, 518, 518, generator=torch.Generator().manual_seed(2))
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    with torch.no_grad():
        maps = ref.get_intermediate_layers((x - mean) / std, n=layers, reshape=True, norm=True)
        feats = torch.cat(list(maps), dim=1)
        want = F.conv2d(F.batch_norm(feats, head["decode_head.bn.running_mean"], head["decode_head.bn.running_var"],
                                     head["decode_head.bn.weight"], head["decode_head.bn.bias"], eps=1e-5),
                        head["decode_head.conv_seg.weight"], head["decode_head.conv_seg.bias"])
        got = model.net.eval()(x)
    assert got.shape == want.shape == (1, 21, 37, 37)
    err = float((got - want).abs().max() / want.abs().max())
    assert err < 1e-5, err


def test_a_head_without_its_trunk_file_is_refused_with_the_file_to_add(tmp_path: Path) -> None:
    path, _, _ = _reference_files(tmp_path, layers=1, nc=3)
    (tmp_path / "dinov2_vits14_pretrain.pth").unlink()
    with pytest.raises(CheckpointError, match="dinov2_vits14_pretrain.pth"):
        LibreYOLO(str(path))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_shapes_sem_dataset(tmp_path_factory.mktemp("sem"), n_train=4, n_val=2, imgsz=56)


def test_weights_name_predict_and_fused_attention_default() -> None:
    assert parse_weights_name("LibreDINOv2segs14ms-sem.pt").family == "dinov2_seg"
    torch.manual_seed(0)
    model = LibreYOLO("LibreDINOv2segs14-sem.pt", pretrained=False, nc=3)
    assert (model.FAMILY, model.task, model.size, model.imgsz) == ("dinov2_seg", "semantic", "s14", 518)
    assert model.arch == {} and not any(m.fused_attn for m in fused_attention_modules(model.net))
    (r,) = model(SAMPLE_IMAGE, imgsz=112)
    assert r.semantic.shape == r.orig_shape == (480, 640) and int(r.semantic.max()) < 3


def test_the_loss_falls_over_a_few_steps(data: Path) -> None:
    losses = loss_history("LibreDINOv2segs14-sem.pt", data, imgsz=56, augment=False)
    assert losses[-1] < 0.8 * losses[0], losses


def test_train_then_val_then_reload(data: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LibreYOLO("LibreDINOv2segs14-sem.pt", pretrained=False, nc=3)
    out = model.train(data=str(data), epochs=1, imgsz=56, batch=2, workers=0, project=str(tmp_path), plots=False)
    assert model.nc == 7 and 0.0 <= out["mIoU"] <= 1.0 and Path(out["best"]).is_file()
    m = model.val(data=str(data), imgsz=56, batch=2)
    assert m["images"] == 2.0 and 0.0 <= m["mIoU"] <= 1.0
    again = LibreYOLO(out["best"])
    assert (again.FAMILY, again.task, again.nc, again.size) == ("dinov2_seg", "semantic", 7, "s14")

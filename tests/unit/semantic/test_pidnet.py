"""PIDNet-S on a CPU (issue 22): the parameter count against the paper, the shapes of the three
outputs (training) and of the main one (eval), the boundary targets of a hand-made mask, the
four-term loss (finite, falling over a few steps on shapes-sem), prediction through the public
API, and the converter on a state dict spelled like the reference implementation's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.convert import ForeignWeights, convert_foreign
from libreyolo.data.semantic import IGNORE, SemanticDataset, collate_semantic, load_semantic_data
from libreyolo.data.shapes_sem import ensure_shapes_sem_dataset
from libreyolo.errors import CheckpointError
from libreyolo.models.pidnet.loss import PIDNetLoss, boundary_targets
from libreyolo.models.pidnet.nn import build_pidnet
from libreyolo.registry import parse_weights_name

PUBLISHED = 7.6e6  # the paper's PIDNet-S (Cityscapes, 19 classes), the network that runs at inference


def test_parameter_count_is_the_papers() -> None:
    net = build_pidnet(size="s", nc=19)
    total = sum(p.numel() for p in net.parameters())
    aux = sum(p.numel() for k, p in net.named_parameters() if k.startswith(("seghead_p.", "seghead_d.")))
    assert (total, total - aux) == (7_720_935, 7_625_715)
    assert abs(total - aux - PUBLISHED) / PUBLISHED < 0.03 and abs(total - PUBLISHED) / PUBLISHED < 0.03


@pytest.mark.parametrize("hw", [(64, 64), (96, 128)])
def test_output_shapes_in_train_and_eval(hw: tuple[int, int]) -> None:
    torch.manual_seed(0)
    net = build_pidnet(size="s", nc=5)
    x = torch.rand(2, 3, *hw)
    h, w = hw[0] // 8, hw[1] // 8
    aux, main, bd = net.train()(x)
    assert tuple(aux.shape) == tuple(main.shape) == (2, 5, h, w) and tuple(bd.shape) == (2, 1, h, w)
    with torch.no_grad():
        out = net.eval()(x)
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == (2, 5, h, w)


def test_eval_runs_no_auxiliary_head() -> None:
    net = build_pidnet(size="s", nc=3).eval()
    ran: list[str] = []
    for name in ("seghead_p", "seghead_d", "final_layer"):
        getattr(net, name).register_forward_hook(lambda m, i, o, n=name: ran.append(n))
    with torch.no_grad():
        net(torch.rand(1, 3, 64, 64))
    assert ran == ["final_layer"]


def test_boundary_targets_of_a_hand_made_mask() -> None:
    m = torch.zeros(1, 6, 6, dtype=torch.long)
    m[0, 2:, 3:] = 2          # a block of class 2 in the lower right
    m[0, 0, :] = IGNORE       # an unlabelled top row: no edge against it
    want = torch.zeros(6, 6, dtype=torch.long)
    want[2:, 2:4] = 1         # the vertical edge, both sides
    want[1:3, 3:] = 1         # the horizontal edge, both sides
    assert torch.equal(boundary_targets(m, radius=0)[0].long(), want)
    dilated = boundary_targets(m, radius=1)[0]
    assert dilated.sum() > want.sum() and bool((dilated >= want.float()).all())
    assert boundary_targets(torch.ones(2, 5, 5, dtype=torch.long)).sum() == 0  # one class: no boundary


def test_loss_terms_and_eval_output() -> None:
    torch.manual_seed(0)
    mask = torch.zeros(2, 32, 32, dtype=torch.long)
    mask[:, 8:24, 8:24] = 1
    mask[:, :2] = IGNORE
    preds = (torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4), torch.full((2, 1, 4, 4), 5.0))
    loss, items = PIDNetLoss()(preds, {"mask": mask})
    assert items.shape == (4,) and bool(torch.isfinite(items).all()) and bool((items > 0).all())
    assert torch.allclose(loss / 2, items @ torch.tensor([1.0, 0.4, 20.0, 1.0]))
    # boundary logits all below the 0.8 threshold: the boundary-aware term has no pixel and is 0
    _, low = PIDNetLoss()((preds[0], preds[1], torch.full((2, 1, 4, 4), -5.0)), {"mask": mask})
    assert float(low[3]) == 0.0 and float(low[0]) == pytest.approx(float(items[0]))
    ev_loss, ev = PIDNetLoss()(preds[1], {"mask": mask})  # eval mode: the main logits alone
    assert float(ev[0]) == pytest.approx(float(items[0])) and ev[1:].tolist() == [0.0, 0.0, 0.0]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_shapes_sem_dataset(tmp_path_factory.mktemp("sem"), n_train=4, n_val=2, imgsz=64)


def test_the_loss_falls_over_a_few_steps(data: Path) -> None:
    cfg = load_semantic_data(data)
    ds = SemanticDataset(cfg.train, imgsz=64, nc=cfg.nc, augment=False)
    batch = collate_semantic([ds[i] for i in range(len(ds))])
    torch.manual_seed(0)
    model = LibreYOLO("LibrePIDNets-sem.pt", pretrained=False, nc=cfg.nc)
    net, criterion = model.net.train(), model.build_criterion()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = batch["img"].float() / 255
    losses = []
    for _ in range(8):
        loss, items = criterion(net(x), batch)
        assert bool(torch.isfinite(items).all()), items
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(b < a for a, b in zip(losses[:-1], losses[1:], strict=True)) and losses[-1] < 0.9 * losses[0], losses


def test_train_one_epoch_then_reload(data: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LibreYOLO("LibrePIDNets-sem.pt", pretrained=False, nc=3)
    out = model.train(data=str(data), epochs=1, imgsz=64, batch=2, workers=0, project=str(tmp_path), plots=False)
    assert model.nc == 7 and 0.0 <= out["mIoU"] <= 1.0 and Path(out["best"]).is_file()
    header = (Path(out["save_dir"]) / "results.csv").read_text().splitlines()[0]
    assert all(f"train/{n}_loss" in header for n in ("ce", "aux", "bd", "sb")) and "val/ce_loss" in header, header
    again = LibreYOLO(out["best"])
    assert (again.FAMILY, again.task, again.nc) == ("pidnet", "semantic", 7)


def test_predict_through_the_public_api() -> None:
    assert parse_weights_name("LibrePIDNets-sem.pt").task == "semantic"
    torch.manual_seed(0)
    model = LibreYOLO("LibrePIDNets-sem.pt", pretrained=False, nc=3)
    assert (model.FAMILY, model.task, model.size) == ("pidnet", "semantic", "s")
    (r,) = model(SAMPLE_IMAGE, imgsz=64)
    assert r.semantic.shape == r.orig_shape == (480, 640) and r.semantic.dtype == torch.int64
    assert 0 <= int(r.semantic.min()) and int(r.semantic.max()) < 3


def _reference_spelling(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict under the reference's names: a training wrapper's ``model.`` prefix, the
    pooling module's ``scale1..4`` / ``scale_process``, and a loss buffer the converter drops."""
    out = {}
    for k, v in sd.items():
        if k.startswith("spp.scales."):
            i, rest = k[len("spp.scales."):].split(".", 1)
            k = f"spp.scale{int(i) + 1}.{rest}"
        k = k.replace("spp.process.", "spp.scale_process.")
        out[f"model.{k}"] = v.clone()
    out["loss.class_weight"] = torch.ones(19)
    return out


def test_converter_on_a_state_dict_with_the_reference_names() -> None:
    torch.manual_seed(1)
    src_net = build_pidnet(size="s", nc=19)
    for m in src_net.modules():  # non-trivial BatchNorm statistics
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    ref = _reference_spelling(src_net.state_dict())
    # the reference's own layout: single-block D layer, the 1/64 pooling branches, the heads
    assert tuple(ref["model.layer3_d.downsample.0.weight"].shape) == (32, 64, 1, 1)
    assert tuple(ref["model.layer5.0.downsample.0.weight"].shape) == (512, 256, 1, 1)
    assert tuple(ref["model.spp.scale4.3.weight"].shape) == (96, 512, 1, 1)
    assert tuple(ref["model.spp.scale_process.2.weight"].shape) == (384, 96, 3, 3)
    assert tuple(ref["model.seghead_d.conv2.weight"].shape) == (1, 32, 1, 1)
    model = convert_foreign(ForeignWeights(source="pidnet", arch="pidnet_s", state_dict=ref, path="<memory>"))
    assert (model.FAMILY, model.size, model.nc, model.task) == ("pidnet", "s", 19, "semantic")
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(model.net.eval()(x), src_net.eval()(x))
    bad = dict(ref)
    bad["model.spp.extra.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match="spp.extra"):
        convert_foreign(ForeignWeights(source="pidnet", arch="pidnet_s", state_dict=bad, path="<memory>"))


def test_reference_files_on_disk_load_through_libreyolo(tmp_path: Path) -> None:
    """A ``best.pt`` as the reference's train.py writes it (the wrapper's state dict) and a
    ``checkpoint.pth.tar`` (under ``"state_dict"`` beside epoch / optimiser values) are recognised
    and load bit for bit; a file without PIDNet's keys is not taken for one."""
    from libreyolo import LibreYOLO
    from libreyolo.convert import detect_format

    torch.manual_seed(3)
    src_net = build_pidnet(size="s", nc=19)
    ref = _reference_spelling(src_net.state_dict())
    best, ckpt, other = tmp_path / "best.pt", tmp_path / "checkpoint.pth.tar", tmp_path / "other.pt"
    torch.save(ref, best)
    torch.save({"epoch": 3, "best_mIoU": 0.5, "state_dict": ref, "optimizer": {"state": {}, "param_groups": []}}, ckpt)
    torch.save({"conv1.0.weight": torch.zeros(1)}, other)
    assert detect_format(best) == detect_format(ckpt) == "pidnet" and detect_format(other) is None
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    for path in (best, ckpt):
        model = LibreYOLO(str(path))
        assert (model.FAMILY, model.size, model.nc) == ("pidnet", "s", 19)
        own = model.net.state_dict()
        for k, v in src_net.state_dict().items():
            assert torch.equal(own[k], v), k
        with torch.no_grad():
            assert torch.equal(model.net.eval()(x), src_net.eval()(x))

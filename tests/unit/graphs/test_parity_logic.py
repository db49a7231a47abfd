"""CPU tests of the parity harness's pure parts: probes, bitwise comparison, matrix -> flag."""

from __future__ import annotations

import json

import pytest
import torch
from graph_tiny_family import TinyFamily

from libreyolo.graphs.parity import (
    compare_outputs,
    expected_flag,
    probe_batch,
    randomise_norm_stats,
    render_markdown,
    write_matrix,
)
from libreyolo.model import Model


@pytest.mark.parametrize("kind", ["uniform", "image", "normal"])
def test_probes_are_deterministic_in_range_and_shaped(kind):
    a = probe_batch(kind, (2, 3, 32, 48), device="cpu", seed=1)
    b = probe_batch(kind, (2, 3, 32, 48), device="cpu", seed=1)
    assert a.shape == (2, 3, 32, 48) and a.dtype == torch.float32
    assert torch.equal(a, b) and 0.0 <= float(a.min()) and float(a.max()) <= 1.0


def test_probe_distributions_differ():
    u = probe_batch("uniform", (1, 3, 64, 64), device="cpu")
    im = probe_batch("image", (1, 3, 64, 64), device="cpu")
    # noise has no spatial correlation; the image probe does
    def neighbour_corr(x):
        a, b = x[..., :, :-1].flatten(), x[..., :, 1:].flatten()
        return float(torch.corrcoef(torch.stack([a, b]))[0, 1])
    assert abs(neighbour_corr(u)) < 0.2 and neighbour_corr(im) > 0.5
    with pytest.raises(ValueError):
        probe_batch("gamma", (1, 3, 8, 8), device="cpu")


def test_compare_outputs_is_bitwise():
    x = torch.rand(4)
    assert compare_outputs((x, [x]), (x.clone(), [x.clone()]))["equal"]
    y = x.clone()
    y[0] = torch.nextafter(y[0], torch.tensor(2.0))  # one ULP
    r = compare_outputs(x, y)
    assert not r["equal"] and 0 < r["max_abs_diff"] < 1e-6
    assert not compare_outputs(x, x.half())["equal"]
    assert not compare_outputs((x,), [x])["equal"]
    assert not compare_outputs(x, x[:2])["equal"]


def test_randomised_norm_stats_are_seeded_and_nontrivial():
    a, b = Model(TinyFamily(size="n", nc=2)), Model(TinyFamily(size="n", nc=2))
    randomise_norm_stats(a.net, seed=3)
    randomise_norm_stats(b.net, seed=3)
    bn_a, bn_b = a.net.stem[1], b.net.stem[1]
    assert torch.equal(bn_a.running_var, bn_b.running_var) and not torch.all(bn_a.running_mean == 0)


def _row(size, result="pass", task="detect", family="tiny"):
    return {"family": family, "task": task, "size": size, "dtype": "float32", "result": result}


def test_expected_flag_needs_every_size_and_all_passing():
    class Two(TinyFamily):
        SIZES = ("n", "s")

    assert expected_flag(Two, [])[0] is False
    assert expected_flag(Two, [_row("n")])[0] is False  # size s missing
    assert expected_flag(Two, [_row("n"), _row("s")])[0] is True
    assert expected_flag(Two, [_row("n"), _row("s"), _row("s", "fail")])[0] is False
    assert expected_flag(Two, [_row("n"), _row("s", "error")])[0] is False
    assert expected_flag(Two, [_row("n", family="other"), _row("s", family="other")])[0] is False


def test_write_matrix_writes_strict_json_and_a_table(tmp_path):
    rows = [{**_row("n"), "probes": {"uniform": {"equal": True, "max_abs_diff": 0.0, "n": 2},
                                     "image": {"equal": False, "max_abs_diff": float("nan"), "n": 2}},
             "capture_ms": 1.5, "stages": [{"name": "net", "captured": True}]}]
    env = {"torch": "2.x", "cuda": "12", "cudnn": 9, "gpu": "GPU", "date": "d", "commit": "c"}
    write_matrix(rows, env=env, settings={"imgsz": 64, "batch": 1, "seed": 0, "fuse": True,
                                          "probes": ["uniform", "image"]},
                 json_path=tmp_path / "m.json", md_path=tmp_path / "m.md")
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["rows"][0]["probes"]["image"]["max_abs_diff"] == "nan"
    md = (tmp_path / "m.md").read_text()
    assert "| tiny | detect | n | 1x64 | float32 | **pass** | equal | differs (nan) |" in md
    assert render_markdown(doc).count("\n| tiny") == 1


def test_an_architecture_variant_gets_rows_of_its_own():
    """The yolo9 head of Ultralytics checkpoints (box_groups=1) is probed as its own rows: built
    through set_arch with seeded weights, keyed apart from the default head, labelled in the table."""
    from libreyolo.graphs.parity import build_probe_model, row_key
    from libreyolo.models.yolo9.family import YOLO9

    a = build_probe_model(YOLO9, size="t", task="detect", device="cpu", seed=0, fuse=False, arch={"box_groups": 1})
    b = build_probe_model(YOLO9, size="t", task="detect", device="cpu", seed=0, fuse=False, arch={"box_groups": 1})
    base = build_probe_model(YOLO9, size="t", task="detect", device="cpu", seed=0, fuse=False)
    assert a.arch == {"box_groups": 1} and base.arch == {}
    sa, sb = a.net.state_dict(), b.net.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)  # seeded: the same variant twice
    assert set(sa) != set(base.net.state_dict()) or any(
        sa[k].shape != v.shape for k, v in base.net.state_dict().items() if k in sa)
    row = {"family": "yolo9", "task": "detect", "size": "t", "dtype": "float16", "result": "pass"}
    assert row_key({**row, "arch": {"box_groups": 1}}) != row_key(row)
    doc = {"environment": {"gpu": "g", "torch": "t", "cuda": "c", "cudnn": 1, "date": "d", "commit": "x"},
           "settings": {"batch": 1, "imgsz": 64, "seed": 0, "fuse": True, "probes": ["uniform", "image"]},
           "rows": [{**row, "arch": {"box_groups": 1}, "probes": {}}]}
    assert "| t (box_groups=1) |" in render_markdown(doc)
    with pytest.raises(ValueError, match="no architecture options"):
        build_probe_model(TinyFamily, size="n", task="detect", device="cpu", seed=0, arch={"box_groups": 1})


def test_calibrated_probe_model_answers_its_input():
    """PicoDet's probe model calibrates BatchNorm on the two probes: its output depends on the input
    (with randomised statistics the untrained ESNet's output was constant, making rows vacuous),
    stays in fp16 range, and is deterministic per seed."""
    from libreyolo.graphs.parity import build_probe_model, compare_outputs, probe_batch
    from libreyolo.models.picodet.family import PicoDet

    assert PicoDet.PARITY_NORM_STATS == "calibrated"
    a = build_probe_model(PicoDet, size="m", task="detect", device="cpu", seed=0, imgsz=128)
    b = build_probe_model(PicoDet, size="m", task="detect", device="cpu", seed=0, imgsz=128)
    xs = [probe_batch(k, (1, 3, 128, 128), device="cpu", seed=i) for i, k in enumerate(("uniform", "image"))]
    ya, yb = (a.eager_forward(x) for x in xs)
    diff = compare_outputs(ya, yb)
    assert not diff["equal"] and diff["max_abs_diff"] > 1e-2, diff
    assert max(float(t.abs().max()) for t in ya) < 1e3
    assert compare_outputs(ya, b.eager_forward(xs[0]))["equal"]

"""The graph path's split preprocessing (CPU): the letterboxed pixels plus the :class:`Normalize`
step that a prediction graph runs as its first kernels give exactly what :func:`preprocess`
returns; the runner and the backend apply a prologue before the network on every path that does
not replay (refusal, ``cuda_graph=False``); the in-place host rescale equals :func:`scale_boxes`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libreyolo.graphs.runner import GraphKey, PredictGraphs, with_prologue
from libreyolo.graphs.seam import Stage
from libreyolo.ops.boxes import scale_boxes, scale_boxes_into
from libreyolo.tasks.detect.preprocess import Normalize, preprocess, preprocess_pixels

CPU = torch.device("cpu")


def _img(h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


CASES = {
    "one image, no resize": ([_img(480, 640, 0)], (640, 640), True),
    "one image, resize and pad": ([_img(333, 517, 1)], (320, 320), True),
    "same-shaped batch, square": ([_img(200, 300, 2), _img(200, 300, 3)], (256, 256), False),
    "mixed shapes": ([_img(100, 90, 4), _img(64, 200, 5)], (128, 128), True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("bgr", [True, False])
@pytest.mark.parametrize(("dtype", "cl"), [(torch.float32, False), (torch.float32, True), (torch.bfloat16, True)])
def test_pixels_then_normalize_is_preprocess(case, bgr, dtype, cl):
    images, imgsz, rect = CASES[case]
    want, want_params = preprocess(images, imgsz, CPU, dtype=dtype, channels_last=cl, rect=rect, bgr=bgr)
    px, params, step = preprocess_pixels(images, imgsz, CPU, dtype=dtype, channels_last=cl, rect=rect, bgr=bgr)
    assert step == Normalize(dtype=dtype, channels_last=cl, bgr=bgr)
    got = step(px)
    assert got.dtype == dtype and got.shape == want.shape and torch.equal(got, want)
    assert got.is_contiguous(memory_format=torch.channels_last if cl else torch.contiguous_format)
    assert params == want_params


def test_normalize_names_key_graphs_apart():
    a = Normalize(dtype=torch.float16, channels_last=True, bgr=True)
    b = Normalize(dtype=torch.float16, channels_last=True, bgr=False)
    assert a == Normalize(dtype=torch.float16, channels_last=True, bgr=True) and hash(a) == hash(
        Normalize(dtype=torch.float16, channels_last=True, bgr=True))
    assert a.name != b.name and a.name == "u8/255:float16:cl:bgr"
    x = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)
    ka, kb = GraphKey.of(x, None, decoded=True, prologue=a), GraphKey.of(x, None, decoded=True, prologue=b)
    assert ka != kb and ka.prologue == a.name and ka.dtype == "float16" and ka.input_dtype == "uint8"
    assert GraphKey.of(x, None, decoded=True).prologue == ""


def test_with_prologue_joins_a_captured_first_stage_and_precedes_an_eager_one():
    double = Stage(name="net", fn=lambda v: v * 2, capturable=True)
    eager = Stage(name="host", fn=lambda v: v + 1, capturable=False, reason="host sync")
    plus = lambda v: v + 10  # noqa: E731
    (joined,) = with_prologue([double], plus)
    assert joined.name == "prologue+net" and joined.capturable and joined.fn(torch.tensor(1.0)).item() == 22.0
    first, second = with_prologue([eager], plus)
    assert (first.name, first.capturable, second) == ("prologue", True, eager)
    assert with_prologue([double], None) == [double]


def _tiny_model():
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    return LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=3)


def test_runner_and_backend_apply_the_prologue_where_nothing_replays():
    model = _tiny_model()
    twin = model.prepared(half=False)
    step = Normalize(dtype=torch.float32, channels_last=False, bgr=True)
    px = torch.from_numpy(_img(64, 64, 7)).permute(2, 0, 1)[None]
    want = twin.eager_forward(step(px), decoded=True)
    runner = PredictGraphs(twin.family)
    got_auto = runner.run(px, policy="auto", decoded=True, prologue=step, host=True)  # CPU: refused, eager
    got_off = twin.forward(px, cuda_graph=False, decoded=True, prologue=step, host=True)
    assert torch.equal(got_auto, want) and torch.equal(got_off, want)
    assert runner.info()["policy"]["eager_runs"] == 1


def test_in_place_host_rescale_equals_scale_boxes():
    rows = np.random.default_rng(3).uniform(-50, 700, (40, 6)).astype(np.float32)
    want = scale_boxes(torch.from_numpy(rows[:, :4].copy()), ratio=0.37, pad=(3.0, 41.5), orig_shape=(500, 700))
    got = rows.copy()
    scale_boxes_into(got, ratio=0.37, pad=(3.0, 41.5), orig_shape=(500, 700))
    assert np.array_equal(got[:, :4], want.numpy()) and np.array_equal(got[:, 4:], rows[:, 4:])


def test_repeated_predict_options_with_list_values_are_resolved_once():
    model = _tiny_model()
    a = model._options({"conf": 0.3, "classes": [0, 2], "imgsz": [64, 96]})
    b = model._options({"conf": 0.3, "classes": [0, 2], "imgsz": [64, 96]})
    c = model._options({"conf": 0.3, "classes": [0, 1], "imgsz": [64, 96]})
    assert a is b and a is not c and a.classes == [0, 2] and c.classes == [0, 1] and a.imgsz == (64, 96)

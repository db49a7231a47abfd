"""PredictOptions is the one definition of the predict keywords: Model.predict / Model.track
take exactly its fields (same names, same defaults; track's conf is 0.1), and resolving keeps
the values and messages the pipeline relies on."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from libreyolo.engine.predictor import PredictOptions
from libreyolo.errors import ConfigError
from libreyolo.model import Model

FIELDS = {f.name: f.default for f in dataclasses.fields(PredictOptions)}
MODEL = SimpleNamespace(nc=3, stride=32, imgsz=640)  # what resolve reads of a model


def _keywords(fn) -> dict[str, object]:
    params = inspect.signature(fn).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for n, p in params.items() if n not in ("self", "source"))
    return {n: p.default for n, p in params.items() if n != "self"}


def test_every_field_has_a_default_and_a_help() -> None:
    for f in dataclasses.fields(PredictOptions):
        assert f.default is not dataclasses.MISSING, f.name
        assert f.metadata.get("help"), f.name


def test_predict_signature_is_the_fields() -> None:
    assert _keywords(Model.predict) == {"source": None, **FIELDS, "stream": False}


def test_track_signature_is_the_fields_with_its_own_conf() -> None:
    own = {"source": None, "persist": False, "tracker": "bytetrack", "stream": False}
    assert _keywords(Model.track) == {**own, **FIELDS, "conf": 0.1}  # low-score association (ByteTrack)


def test_predict_and_track_pass_every_option_through(monkeypatch) -> None:
    seen = []
    monkeypatch.setattr(PredictOptions, "build", classmethod(lambda cls, *, model, **kw: seen.append(kw)))
    import importlib

    predictor = importlib.import_module("libreyolo.engine.predictor")
    track = importlib.import_module("libreyolo.trackers.track")  # the module (the package re-exports track())

    monkeypatch.setattr(predictor, "predict", lambda *a, **k: iter(()))
    monkeypatch.setattr(track, "track", lambda *a, **k: iter(()))
    from libreyolo.models.yolo9.family import YOLO9

    m = Model(YOLO9(size="t", nc=3))
    m.predict(None, conf=0.5, line_width=3)
    m.track(None, iou=0.5)
    assert seen[0] == {**FIELDS, "conf": 0.5, "line_width": 3}
    assert seen[1] == {**FIELDS, "conf": 0.1, "iou": 0.5}


def test_build_resolves_the_values() -> None:
    opts = PredictOptions.build(model=MODEL, imgsz=320, classes=1, device="cpu", save_dir="out", conf=1)
    assert opts.imgsz == (320, 320) and opts.classes == [1] and opts.device == torch.device("cpu")
    assert opts.save_dir == Path("out") and isinstance(opts.conf, float)
    default = PredictOptions().resolve(MODEL)
    assert default.imgsz == (640, 640) and default.device is None and default.save_dir is None
    assert PredictOptions(imgsz=(480, 640)).resolve(MODEL).imgsz == (480, 640)


@pytest.mark.parametrize(("kw", "message"), [
    ({"conf": 1.5}, "conf must be a number in [0, 1], got 1.5"),
    ({"iou": True}, "iou must be a number in [0, 1], got True"),
    ({"max_det": 0}, "max_det must be a positive int, got 0"),
    ({"batch": 1.0}, "batch must be a positive int, got 1.0"),
    ({"classes": [3]}, "classes must be class ids in [0, 2], got [3]"),
    ({"half": 1}, "half must be True or False, got 1"),
    ({"vid_stride": 0}, "vid_stride must be a positive int (1 reads every video frame), got 0"),
    ({"line_width": 0}, "line_width must be a positive int (pixels) or None (scaled to the image), got 0"),
    ({"cuda_graph": "yes"}, "cuda_graph must be False, True or 'auto', got 'yes'"),
    ({"confidence": 0.5}, "Did you mean 'conf'?"),
])
def test_build_messages(kw, message) -> None:
    with pytest.raises(ConfigError) as e:
        PredictOptions.build(model=MODEL, **kw)
    assert message in str(e.value)


def test_pick_takes_only_the_options() -> None:
    assert PredictOptions.pick({"source": "a.jpg", "conf": 0.3, "stream": True}) == {"conf": 0.3}
    assert PredictOptions.names() == tuple(FIELDS)


def test_repeated_keywords_reuse_the_resolved_options() -> None:
    """The same keywords resolve once per model; other keywords, another input size or a prompt
    array (not hashable) resolve again; a bad value still raises on every call."""
    import numpy as np

    from libreyolo import LibreYOLO
    from libreyolo.errors import ConfigError

    model = LibreYOLO("LibreYOLO9t.pt")
    kw = dict(conf=0.3, classes=[0, 2], imgsz=320)
    a = model._options(dict(kw))
    assert model._options(dict(kw)) is a and a.classes == [0, 2] and a.imgsz == (320, 320)
    b = model._options(dict(kw, conf=0.4))
    assert b is not a and b.conf == 0.4
    model.imgsz = 256  # what an unset imgsz resolves to
    c1, c2 = model._options({"conf": 0.3}), model._options({"conf": 0.3})
    assert c1 is c2 and c1.imgsz == (256, 256)
    model.imgsz = 320
    assert model._options({"conf": 0.3}).imgsz == (320, 320)
    p1 = model._options({"points": np.zeros((1, 2))})
    assert model._options({"points": np.zeros((1, 2))}) is not p1
    for _ in range(2):
        with pytest.raises(ConfigError, match="conf"):
            model._options({"conf": 2.0})

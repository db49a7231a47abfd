"""The ``libreyolo`` command line run in-process: dispatch, help, error mapping and exit codes."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import cv2
import numpy as np
import pytest

import libreyolo
from libreyolo.cli import commands as cli_commands
from libreyolo.cli.main import entrypoint
from libreyolo.errors import CheckpointError, ConfigError, DatasetError, SourceError

REPO = Path(libreyolo.__file__).resolve().parent.parent


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = entrypoint(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _patch_run(monkeypatch, name: str, fn) -> None:
    cmd = cli_commands.COMMANDS[name]
    monkeypatch.setitem(cli_commands.COMMANDS, name, dataclasses.replace(cmd, run=fn))


class _FakeModel:
    """Stands in for a loaded model; records what the CLI passed."""

    calls: list[tuple[str, dict]] = []

    def __init__(self, name, pretrained):
        self.name, self.pretrained = name, pretrained

    def train(self, **kw):
        self.calls.append(("train", {"model": self.name, "pretrained": self.pretrained, **kw}))
        return {"mAP50-95": 0.5}

    def val(self, **kw):
        self.calls.append(("val", kw))
        return {"mAP50-95": 0.4321, "mAP50": 0.6}

    def export(self, **kw):
        self.calls.append(("export", kw))
        return Path("model.onnx")


@pytest.fixture
def fake_model(monkeypatch):
    import libreyolo.model as loader

    _FakeModel.calls = []
    monkeypatch.setattr(loader, "LibreYOLO", lambda name, *, pretrained: _FakeModel(name, pretrained))
    return _FakeModel


# ------------------------------------------------------------------ help and version
def test_general_help_lists_commands(capsys) -> None:
    for argv in (["--help"], ["help"], []):
        code, out, _ = _run(capsys, *argv)
        assert code == 0
        for name in ("predict", "train", "val", "export", "benchmark", "version"):
            assert f"  {name}" in out


def test_command_help_lists_keys_defaults_and_an_example(capsys) -> None:
    code, out, _ = _run(capsys, "predict", "--help")
    assert code == 0
    assert "conf          0.25" in out and "save          true" in out and "SAMPLE_IMAGE" in out
    assert "example:\n  libreyolo predict" in out
    code, out2, _ = _run(capsys, "help", "predict")
    assert code == 0 and out2 == out
    code, out, _ = _run(capsys, "train", "--help")
    assert code == 0 and "cuda_graph" in out and "epochs" in out and "--cuda-graph" in out


def test_version(capsys) -> None:
    code, out, _ = _run(capsys, "version")
    assert code == 0 and out.startswith(f"libreyolo {libreyolo.__version__}\n") and "torch " in out
    code, out, _ = _run(capsys, "--version")
    assert code == 0 and libreyolo.__version__ in out


def test_python_dash_m_libreyolo_version() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "libreyolo", "version"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"libreyolo {libreyolo.__version__}")
    proc = subprocess.run([sys.executable, "-m", "libreyolo.cli", "predcit"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        "libreyolo: error: unknown command 'predcit'. Did you mean 'predict'? "
        "Commands: predict, train, val, export, convert, benchmark, version, help."
    )


# ------------------------------------------------------------------ user mistakes
@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["predcit"], "Did you mean 'predict'"),
        (["predict", "conff=0.3"], "Did you mean 'conf'"),
        (["predict", "max_det=lots"], "integer"),
        (["predict", "--conf", "0.3"], "--conf=0.3"),
        (["conf=0.3"], "no command"),
        (["val", "splt=test"], "Did you mean 'split'"),
        (["export", "opset=x"], "integer"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(capsys, argv, match) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("libreyolo: error: ") and match in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("exc", [SourceError("no such file"), CheckpointError("bad ckpt"),
                                 DatasetError("empty dataset"), ConfigError("bad value")])
def test_library_errors_map_to_their_exit_codes(capsys, monkeypatch, exc) -> None:
    def boom(kw, quiet):
        raise exc

    _patch_run(monkeypatch, "version", boom)
    code, _, err = _run(capsys, "version")
    assert code == exc.exit_code and code != 0
    assert err == f"libreyolo: error: {exc}\n"


def test_not_implemented_is_a_one_line_error(capsys, monkeypatch) -> None:
    def boom(kw, quiet):
        raise NotImplementedError("family 'yolo9' has not opted in to CUDA graphs")

    _patch_run(monkeypatch, "version", boom)
    code, _, err = _run(capsys, "version")
    assert code == 1 and err == "libreyolo: error: family 'yolo9' has not opted in to CUDA graphs\n"


def test_keyboard_interrupt_exits_130(capsys, monkeypatch) -> None:
    def stop(kw, quiet):
        raise KeyboardInterrupt

    _patch_run(monkeypatch, "version", stop)
    code, _, err = _run(capsys, "version")
    assert code == 130 and "interrupted" in err


def test_unexpected_error_is_short_unless_debug(capsys, monkeypatch) -> None:
    def bug(kw, quiet):
        raise RuntimeError("tensor sizes do not match\nsecond line")

    _patch_run(monkeypatch, "version", bug)
    code, _, err = _run(capsys, "version")
    assert code == 1 and "Traceback" not in err
    assert "RuntimeError: tensor sizes do not match" in err and "--debug" in err and "second line" not in err
    code, _, err = _run(capsys, "version", "--debug")
    assert code == 1 and "Traceback" in err and "second line" in err


# ------------------------------------------------------------------ delegation to the API
def test_train_passes_overrides_and_cuda_graph_flag(capsys, fake_model) -> None:
    code, out, _ = _run(capsys, "train", "model=LibreYOLO9s.pt", "data=my.yaml", "epochs=3", "lr0=1",
                        "--cuda-graph", "--no-amp", "name=001")
    assert code == 0 and "mAP50-95" in out
    ((what, kw),) = fake_model.calls
    assert what == "train"
    assert kw == {"model": "LibreYOLO9s.pt", "pretrained": True, "data": "my.yaml", "epochs": 3,
                  "lr0": 1.0, "cuda_graph": True, "amp": False, "name": "001"}
    assert type(kw["lr0"]) is float


def test_train_rejects_unknown_keys_with_suggestion(capsys, fake_model) -> None:
    code, _, err = _run(capsys, "train", "epoch=3")
    assert code == 2 and "Did you mean 'epochs'" in err and not fake_model.calls


def test_val_prints_metrics(capsys, fake_model) -> None:
    code, out, _ = _run(capsys, "val", "data=my.yaml", "split=test", "batch=4", "--half")
    assert code == 0 and "0.4321" in out and "mAP50" in out
    assert fake_model.calls == [("val", {"data": "my.yaml", "split": "test", "batch": 4, "half": True})]


@pytest.mark.parametrize("command", ["val", "train"])
def test_empty_data_is_the_same_error_for_val_and_train(capsys, fake_model, command) -> None:
    code, out, err = _run(capsys, command, "data=")
    assert code == 2 and out == "" and not fake_model.calls
    assert err == ("libreyolo: error: 'data' is empty; pass a dataset yaml, e.g. data=my-dataset.yaml, "
                   "or a built-in dataset name, e.g. data=shapes.\n")


def test_val_takes_workers_and_every_val_config_key(capsys, fake_model) -> None:
    from libreyolo.engine.validator import ValConfig

    code, _, _ = _run(capsys, "val", "data=my.yaml", "workers=1")
    assert code == 0 and fake_model.calls == [("val", {"data": "my.yaml", "workers": 1})]
    keys = cli_commands.COMMANDS["val"].keys()
    assert {f.name for f in dataclasses.fields(ValConfig)} <= set(keys)
    assert "capped" in keys["workers"].help


@pytest.mark.parametrize(("argv", "meant"), [(["predict", "confidence=0.3"], "conf"),
                                             (["predict", "img_size=320"], "imgsz"),
                                             (["val", "imgsize=320"], "imgsz"),
                                             (["export", "weights=x.pt"], "model")])
def test_other_tools_key_names_get_a_suggestion(capsys, argv, meant) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2 and f"Did you mean '{meant}'?" in err and err.count("\n") == 1


def test_export_passes_only_given_keys(capsys, fake_model) -> None:
    code, out, _ = _run(capsys, "export", "format=onnx", "imgsz=320,256", "--dynamic", "opset=17")
    assert code == 0 and "model.onnx" in out
    assert fake_model.calls == [("export", {"format": "onnx", "imgsz": [320, 256], "dynamic": True, "opset": 17})]


def test_benchmark_calls_the_harness(capsys, monkeypatch) -> None:
    seen = {}

    def run_benchmark(*, model, imgsz=640, batch=1, cuda_graph=False, out=None):
        seen.update(model=model, imgsz=imgsz, batch=batch, cuda_graph=cuda_graph, out=out)
        return out

    monkeypatch.setitem(sys.modules, "libreyolo.bench", types.SimpleNamespace(run_benchmark=run_benchmark))
    code, out, _ = _run(capsys, "benchmark", "imgsz=320", "batch=1,8", "--cuda-graph", "out=b/")
    assert code == 0 and "b/" in out
    assert seen == {"model": "LibreYOLO9t.pt", "imgsz": 320, "batch": [1, 8], "cuda_graph": True, "out": "b/"}
    code, _, err = _run(capsys, "benchmark", "iters=5")  # a key this harness version does not take
    assert code == 2 and "iters" in err


def test_benchmark_without_the_harness_is_a_clear_error(capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "libreyolo.bench", None)
    code, _, err = _run(capsys, "benchmark")
    assert code == 1 and "libreyolo.bench" in err and "Traceback" not in err


def test_predict_defaults_match_the_python_api() -> None:
    from libreyolo.assets import SAMPLE_IMAGE
    from libreyolo.model import Model

    keys = cli_commands.COMMANDS["predict"].keys()
    params = inspect.signature(Model.predict).parameters
    for name, key in keys.items():
        if name in ("model", "pretrained", "source", "save"):
            continue
        assert name in params, name
        assert key.default == params[name].default, name
    assert keys["source"].default == SAMPLE_IMAGE and keys["save"].default is True


def test_logging_levels(capsys, monkeypatch) -> None:
    def chatty(kw, quiet):
        logging.getLogger("libreyolo.models.x").info("loaded weights")
        logging.getLogger("libreyolo.graphs.x").debug("graph decision")
        logging.getLogger("otherlib").info("other info")
        logging.getLogger("otherlib").warning("other warning")
        return 0

    _patch_run(monkeypatch, "version", chatty)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # as in a fresh process (pytest installs its own)
    _, _, err = _run(capsys, "version")
    assert "loaded weights" in err and "graph decision" not in err
    assert "other warning" in err and "other info" not in err
    _, _, err = _run(capsys, "version", "--verbose")
    assert "graph decision" in err
    _, _, err = _run(capsys, "version", "--quiet")
    assert "loaded weights" not in err and "other warning" in err
    assert root.handlers == []


def test_logging_state_is_restored(capsys, fake_model) -> None:
    lg = logging.getLogger("libreyolo")
    before = (lg.level, lg.propagate, list(lg.handlers))
    _run(capsys, "val", "data=x.yaml", "-v")
    assert (lg.level, lg.propagate, list(lg.handlers)) == before


# ------------------------------------------------------------------ end to end
_HAS_YOLO9 = importlib.util.find_spec("libreyolo.models.yolo9.nn") is not None


@pytest.mark.skipif(not _HAS_YOLO9, reason="libreyolo/models/yolo9/nn.py is not in this checkout yet")
def test_predict_end_to_end_untrained_tiny_model(capsys, tmp_path: Path) -> None:
    images = tmp_path / "imgs"
    images.mkdir()
    for name in ("a.jpg", "b.png"):
        im = np.zeros((48, 80, 3), np.uint8)
        cv2.circle(im, (40, 24), 12, (255, 255, 255), -1)
        cv2.imwrite(str(images / name), im)
    out_dir = tmp_path / "out"
    code, out, err = _run(capsys, "predict", "model=LibreYOLO9t.pt", "pretrained=false", "imgsz=64",
                          f"source={images}", "conf=0.0", "max_det=2", "batch=2", "device=cpu",
                          f"save_dir={out_dir}")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(str(images / "a.jpg")) and "(80x48)" in lines[0] and "ms inference" in lines[0]
    assert lines[1].startswith(str(images / "b.png"))
    assert lines[2].startswith("2 images in")
    assert lines[3] == f"Results saved to {out_dir}"
    assert sorted(p.name for p in out_dir.iterdir()) == ["a.jpg", "b.png"]
    assert cv2.imread(str(out_dir / "b.png")).shape == (48, 80, 3)
    # --quiet drops the per-image lines; bad conf is a one-line error
    code, out, _ = _run(capsys, "predict", "model=LibreYOLO9t.pt", "pretrained=false", "imgsz=64",
                        f"source={images / 'a.jpg'}", "--no-save", "-q")
    assert code == 0 and out.startswith("1 image in") and "saved" not in out
    code, _, err = _run(capsys, "predict", "model=LibreYOLO9t.pt", "pretrained=false", "conf=1.5",
                        f"source={images}", "--no-save")
    assert code == 2 and "conf" in err and err.count("\n") == 1
    code, _, err = _run(capsys, "predict", "model=LibreYOLO9t.pt", "pretrained=false",
                        f"source={tmp_path / 'missing.jpg'}", "--no-save")
    assert code == SourceError.exit_code and "missing.jpg" in err


@pytest.mark.skipif(not _HAS_YOLO9, reason="libreyolo/models/yolo9/nn.py is not in this checkout yet")
def test_predict_folder_with_corrupt_files_skips_them_and_says_so(capsys, tmp_path: Path) -> None:
    images = tmp_path / "imgs"
    images.mkdir()
    for name in ("a.jpg", "c.png"):
        cv2.imwrite(str(images / name), np.full((32, 48, 3), 90, np.uint8))
    (images / "b.jpg").write_bytes(b"not a jpeg at all")
    code, out, err = _run(capsys, "predict", "model=LibreYOLO9t.pt", "pretrained=false", "imgsz=64",
                          f"source={images}", "--no-save", "device=cpu")
    assert code == 0, err
    lines = out.splitlines()
    assert [ln.split(" (")[0] for ln in lines[:2]] == [str(images / "a.jpg"), str(images / "c.png")]
    assert lines[2].startswith("2 images in") and "(1 unreadable file skipped)" in lines[2]
    assert err.count("b.jpg") == 1 and "WARNING" in err  # one warning naming the file
    # nothing readable: a source error (exit 5) naming the file
    (images / "a.jpg").write_bytes(b"")
    (images / "c.png").write_bytes(b"junk")
    code, out, err = _run(capsys, "predict", "model=LibreYOLO9t.pt", "pretrained=false", "imgsz=64",
                          f"source={images}", "--no-save", "device=cpu")
    assert code == SourceError.exit_code and "none of the 3 files" in err and "a.jpg" in err


def test_every_train_and_val_key_has_help() -> None:
    from libreyolo.cli.commands import _train_keys, _val_keys

    for keys in (_train_keys(), _val_keys()):
        assert keys and not [k for k, key in keys.items() if not key.help]

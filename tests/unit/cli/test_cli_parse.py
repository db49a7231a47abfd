"""Command-line value forms and key checking (libreyolo.cli.parse)."""

from __future__ import annotations

import pytest

from libreyolo.cli.parse import API_DEFAULT, Key, format_default, parse_value, resolve, split_argv
from libreyolo.errors import ConfigError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("640", 640),
        ("-3", -3),
        ("0.25", 0.25),
        (".5", 0.5),
        ("1e-3", 0.001),
        ("true", True),
        ("False", False),
        ("TRUE", True),
        ("None", None),
        ("null", None),
        ("0,2", [0, 2]),
        ("0,", [0]),
        ("[0,2]", [0, 2]),
        ("[640, 480]", [640, 480]),
        ("(640,480)", [640, 480]),
        ("[]", []),
        ("a.jpg,b.jpg", ["a.jpg", "b.jpg"]),
        ("[0.5, true, none, x]", [0.5, True, None, "x"]),
        ("'0'", "0"),
        ('"true"', "true"),
        ("auto", "auto"),
        ("cuda:0", "cuda:0"),
        ("runs/detect/train", "runs/detect/train"),
        ("1.2.3", "1.2.3"),
    ],
)
def test_parse_value(raw: str, expected) -> None:
    value = parse_value(raw)
    assert value == expected and type(value) is type(expected)


def test_split_argv_forms() -> None:
    a = split_argv(["predict", "conf=0.5", "--cuda-graph", "--iou=0.6", "-q", "--debug", "--no-save"])
    assert a.command == "predict" and a.quiet and a.debug and not a.help
    assert [(x.key, x.raw) for x in a.args] == [("conf", "0.5"), ("cuda_graph", None), ("iou", "0.6"),
                                                ("no_save", None)]
    assert split_argv(["--help"]).help and split_argv(["predict", "-h"]).help
    assert split_argv(["help", "train"]).extra == ["train"]
    assert split_argv(["--version"]).version


def test_split_argv_rejects_stray_words_with_a_hint() -> None:
    with pytest.raises(ConfigError, match=r"Did you mean '--conf=0.5'"):
        split_argv(["predict", "--conf", "0.5"])
    with pytest.raises(ConfigError, match="key=value"):
        split_argv(["predict", "bus.jpg"])
    with pytest.raises(ConfigError, match="malformed"):
        split_argv(["predict", "=5"])
    with pytest.raises(ConfigError, match="malformed"):
        split_argv(["predict", "co nf=5"])


KEYS = {k.name: k for k in (
    Key(name="conf", kind="float", default=0.25),
    Key(name="max_det", kind="int", default=300),
    Key(name="half", kind="bool", default=False),
    Key(name="save", kind="bool", default=True, pass_default=True),
    Key(name="name", kind="str"),
    Key(name="classes"),
    Key(name="cuda_graph", default=False),
    Key(name="source", kind="source", default="sample.jpg", pass_default=True),
)}


def _resolve(*tokens: str, keys=KEYS) -> dict:
    return resolve(split_argv(["cmd", *tokens]).args, keys, command="cmd")


def test_resolve_types_values_by_key_kind() -> None:
    out = _resolve("conf=1", "max_det=5", "--half", "name=001", "classes=0,2", "cuda_graph=auto")
    assert out == {"conf": 1.0, "max_det": 5, "half": True, "name": "001", "classes": [0, 2],
                   "cuda_graph": "auto", "save": True, "source": "sample.jpg"}
    assert type(out["conf"]) is float
    assert _resolve("--no-save")["save"] is False
    assert _resolve("save=false")["save"] is False
    assert _resolve("--half=false")["half"] is False
    assert _resolve("conf=none")["conf"] is None
    assert _resolve("cuda_graph=true")["cuda_graph"] is True
    assert _resolve("--cuda-graph")["cuda_graph"] is True
    assert _resolve("--no-cuda-graph")["cuda_graph"] is False
    assert _resolve("name='x y'")["name"] == "x y"


def test_source_lists_and_paths_with_commas(tmp_path) -> None:
    assert _resolve("source=a.jpg,b.jpg")["source"] == ["a.jpg", "b.jpg"]
    odd = tmp_path / "a,b.jpg"
    odd.write_bytes(b"x")
    assert _resolve(f"source={odd}")["source"] == str(odd)


@pytest.mark.parametrize(
    ("token", "match"),
    [
        ("conff=0.3", r"Did you mean 'conf'"),
        ("max_det=2.5", "integer"),
        ("max_det=true", "integer"),
        ("conf=high", "number"),
        ("half=maybe", "true or false"),
        ("--conf", "needs a value"),
        ("--no-conf", "unknown"),
    ],
)
def test_resolve_rejects_bad_arguments(token: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _resolve(token)


def test_resolve_rejects_duplicates_and_accepts_any_key_without_a_key_list() -> None:
    with pytest.raises(ConfigError, match="twice"):
        _resolve("conf=0.1", "conf=0.2")
    with pytest.raises(ConfigError, match="twice"):
        _resolve("--cuda-graph", "cuda_graph=false")
    assert _resolve("foo=1", "--bar", keys=None) == {"foo": 1, "bar": True}


def test_format_default() -> None:
    assert [format_default(v) for v in (True, False, None, [0, 2], 0.25, API_DEFAULT)] == \
        ["true", "false", "none", "0,2", "0.25", "(API default)"]
    assert format_default(Key(name="source", default="/long/path.jpg", shown="SAMPLE_IMAGE")) == "SAMPLE_IMAGE"


@pytest.mark.parametrize(("typed", "meant"), [("confidence", "conf"), ("img_size", "imgsz"), ("imgsize", "imgsz"),
                                              ("weights", "model"), ("Confidence", "conf"), ("confi", "conf")])
def test_aliases_from_other_tools_get_the_libreyolo_name(typed: str, meant: str) -> None:
    keys = {k: Key(name=k) for k in ("model", "conf", "imgsz", "iou")}
    args = split_argv(["predict", f"{typed}=1"]).args
    with pytest.raises(ConfigError, match=f"unknown 'predict' argument '{typed}'. Did you mean '{meant}'"):
        resolve(args, keys, command="predict")


@pytest.mark.parametrize("key", ["data", "model", "source"])
def test_empty_data_model_or_source_is_an_error(key: str) -> None:
    keys = {k: Key(name=k, kind="str") for k in ("data", "model", "name")}
    keys["source"] = Key(name="source", kind="source")
    with pytest.raises(ConfigError, match=f"'{key}' is empty; pass "):
        resolve(split_argv(["val", f"{key}="]).args, keys, command="val")
    with pytest.raises(ConfigError, match=f"'{key}' is empty"):
        resolve(split_argv(["val", f"{key}=''"]).args, keys, command="val")
    assert resolve(split_argv(["val", "name="]).args, keys, command="val") == {"name": ""}  # others may be empty

"""Every CLI verb's keys come from the API's definitions: same names and defaults (the few CLI
differences listed here, as in libreyolo/cli/commands.py), and a help that names no choice the
API rejects."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

import pytest

from libreyolo.cli.commands import COMMANDS, choices
from libreyolo.cli.parse import API_DEFAULT, parse_value
from libreyolo.engine.predictor import PredictOptions
from libreyolo.engine.validator import ValConfig
from libreyolo.errors import ConfigError
from libreyolo.export.config import ExportConfig
from libreyolo.model import LibreYOLO

MODEL_KEYS = ("model", "pretrained")  # LibreYOLO()'s, not the verb's
# verb -> (API dataclass, keys only the CLI has, fields the CLI leaves out, CLI defaults that differ)
VERBS = {
    "predict": (PredictOptions, (*MODEL_KEYS, "source"), ("bgr", "points", "labels", "boxes", "multimask_output"), {"save": True}),
    "val": (ValConfig, MODEL_KEYS, (), {}),
    "export": (ExportConfig, MODEL_KEYS, (), {}),
}
try:
    from libreyolo.training.config import TrainConfig

    VERBS["train"] = (TrainConfig, MODEL_KEYS, (), {})
except ModuleNotFoundError:  # pragma: no cover - a build without training
    pass

_LIST = re.compile(r"((?:[\w:-]+, )+[\w:-]+,? or [\w:-]+)")  # "val, train or test"


def _listed(text: str) -> list[list[str]]:
    return [re.split(r",? or |, ", m) for m in _LIST.findall(text)]


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_cli_keys_and_defaults_are_the_api_fields(verb: str) -> None:
    cls, cli_only, left_out, differ = VERBS[verb]
    keys = COMMANDS[verb].keys()
    fields = {f.name: f.default if f.default is not dataclasses.MISSING else API_DEFAULT
              for f in dataclasses.fields(cls)}
    assert set(keys) == (set(fields) - set(left_out)) | set(cli_only)
    for name, default in fields.items():
        if name in keys and name not in cli_only:
            assert keys[name].default == differ.get(name, default), (verb, name)
            assert keys[name].help, (verb, name)
    assert list(keys)[:2] == list(MODEL_KEYS)  # same order as the API, after the model keys
    assert [k for k in keys if k in fields] == [f for f in fields if f in keys]


def test_model_keys_default_as_libreyolo() -> None:
    params = inspect.signature(LibreYOLO).parameters
    for verb in (*VERBS, "benchmark"):
        keys = COMMANDS[verb].keys()
        assert keys["model"].default == params["model"].default, verb
        if "pretrained" in keys:
            assert keys["pretrained"].default == params["pretrained"].default, verb


def test_predict_save_is_the_documented_cli_difference() -> None:
    keys = COMMANDS["predict"].keys()
    assert PredictOptions().save is False and keys["save"].default is True and keys["save"].pass_default


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_literal_keys_help_lists_exactly_the_accepted_choices(verb: str) -> None:
    cls = VERBS[verb][0]
    hints = typing.get_type_hints(cls)
    keys = COMMANDS[verb].keys()
    for name, hint in hints.items():
        accepted = {str(c).lower() if isinstance(c, bool) else str(c) for c in choices(hint)}
        if not accepted or name not in keys:
            continue
        text = keys[name].help
        for c in accepted:
            assert re.search(rf"\b{re.escape(c)}\b", text), (verb, name, c, text)
        for listed in _listed(text):
            assert set(listed) == accepted, (verb, name, text)


def test_val_split_help_is_what_val_accepts() -> None:
    (listed,) = _listed(COMMANDS["val"].keys()["split"].help)
    assert sorted(listed) == sorted(choices(typing.get_type_hints(ValConfig)["split"])) == ["test", "train", "val"]
    for split in listed:
        assert ValConfig.from_overrides({"split": split}).split == split
    with pytest.raises(ConfigError, match="split"):
        ValConfig.from_overrides({"split": "valid"})


def test_enumerated_helps_name_only_accepted_values() -> None:
    from libreyolo.export.registry import format_names, get_format
    from libreyolo.graphs.runner import check_policy

    (formats,) = _listed(COMMANDS["export"].keys()["format"].help)
    assert sorted(formats) == sorted(format_names())
    for name in formats:
        assert get_format(name).name == name
    for verb in ("predict", "benchmark"):
        (policies,) = _listed(COMMANDS[verb].keys()["cuda_graph"].help)
        for word in policies:
            check_policy(parse_value(word))  # the value the CLI parses the word to is accepted


def test_benchmark_keys_are_benchmark_arguments() -> None:
    from libreyolo.bench.exported import benchmark_exported
    from libreyolo.bench.run import run_benchmark

    keys = COMMANDS["benchmark"].keys()
    for fn in (run_benchmark, benchmark_exported):  # torch models / exported ones: their own defaults
        params = inspect.signature(fn).parameters
        assert set(keys) <= set(params), fn.__name__
    assert all(k.default is API_DEFAULT for n, k in keys.items() if n != "model")

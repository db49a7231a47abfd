"""Registry rules of SPEC K-1..K-4, K-7, K-11 (CPU, no accelerated provider involved)."""

from __future__ import annotations

import types
import warnings

import pytest
import torch

import libreyolo.kernels as kernels
from libreyolo.errors import ConfigError

OP = "test_op"


def _ref(x):
    return ("ref", x)


@pytest.fixture
def reg(isolated_registry):
    isolated_registry.define_slot(OP, reference=_ref)
    return isolated_registry


def test_public_api_is_exactly_k2():
    for name in ("active", "resolve", "register", "unregister", "clear_cache"):
        assert callable(getattr(kernels, name))


def test_reference_when_nothing_registered(reg):
    assert kernels.resolve(OP) is _ref
    assert kernels.active()[OP] == "reference"
    assert kernels.dispatch(OP, 3) == ("ref", 3)


def test_newest_registration_first(reg):
    kernels.register(OP, lambda x: ("a", x), name="a")
    kernels.register(OP, lambda x: ("b", x), name="b")
    assert kernels.dispatch(OP, 1) == ("b", 1)
    assert reg.implementations(OP) == ["b", "a"]
    kernels.register(OP, lambda x: ("a2", x), name="a")  # re-registering moves it to the front
    assert kernels.dispatch(OP, 1) == ("a2", 1)
    assert kernels.active()[OP] == "a"


def test_first_predicate_that_holds_wins(reg):
    kernels.register(OP, lambda x: "cuda-only", name="old", predicate=lambda x=None: True)
    kernels.register(OP, lambda x: "new", name="new",
                     predicate=lambda x=None: isinstance(x, torch.Tensor) and x.dtype == torch.float16)
    assert kernels.dispatch(OP, torch.zeros(2)) == "cuda-only"
    assert kernels.dispatch(OP, torch.zeros(2, dtype=torch.float16)) == "new"


def test_falls_back_to_reference_when_no_predicate_holds(reg):
    kernels.register(OP, lambda x: "never", name="never", predicate=lambda *a, **k: False)
    assert kernels.resolve(OP, torch.zeros(1)) is _ref


def test_slot_without_reference_resolves_to_none(isolated_registry):
    isolated_registry.define_slot("gemm_like")
    assert kernels.resolve("gemm_like", torch.zeros(2)) is None
    assert kernels.active()["gemm_like"] == "unavailable"
    with pytest.raises(ConfigError, match="resolve"):
        kernels.dispatch("gemm_like", torch.zeros(2))
    assert kernels.resolve("no_such_slot") is None


def test_raising_predicate_warns_once_and_is_skipped(reg):
    calls = []

    def bad(x=None):
        calls.append(x)
        raise RuntimeError("boom")

    kernels.register(OP, lambda x: "bad", name="bad", predicate=bad)
    with pytest.warns(RuntimeWarning, match="boom"):
        assert kernels.dispatch(OP, 1) == ("ref", 1)
    kernels.clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise here
        assert kernels.dispatch(OP, 2) == ("ref", 2)
    assert len(calls) == 2


def test_memoised_until_clear_cache_or_registry_change(reg):
    calls = []

    def pred(x=None):
        calls.append(1)
        return True

    kernels.register(OP, lambda x: "fast", name="fast", predicate=pred)
    for _ in range(3):
        kernels.resolve(OP, torch.zeros(2))
    assert len(calls) == 1
    kernels.resolve(OP, torch.zeros(2, dtype=torch.float64))  # another signature
    assert len(calls) == 2
    kernels.clear_cache()
    kernels.resolve(OP, torch.zeros(2))
    assert len(calls) == 3
    kernels.register(OP, lambda x: "other", name="other", predicate=lambda x=None: False)
    kernels.resolve(OP, torch.zeros(2))  # registry change dropped the cache
    assert len(calls) == 4


def test_memo_key_sees_alignment_and_int_values(reg):
    kernels.register(OP, lambda x, *, n=0: "fast", name="fast",
                     predicate=lambda x=None, *, n=0: x is None or (x.shape[-1] % 16 == 0 and n == 1))
    assert kernels.resolve(OP, torch.zeros(32), n=1) is not _ref
    assert kernels.resolve(OP, torch.zeros(33), n=1) is _ref
    assert kernels.resolve(OP, torch.zeros(32), n=2) is _ref


@pytest.mark.parametrize("value", ["off", "reference", "skip", "OFF", " Reference "])
def test_reference_overrides(reg, monkeypatch, value):
    kernels.register(OP, lambda x: "fast", name="fast")
    monkeypatch.setenv("LIBREYOLO_KERNELS", value)
    assert kernels.dispatch(OP, 1) == ("ref", 1)
    assert kernels.active()[OP] == "reference"


def test_named_override_restricts_choice(reg, monkeypatch):
    kernels.register(OP, lambda x: "a", name="alpha")
    kernels.register(OP, lambda x: "b", name="beta")
    monkeypatch.setenv("LIBREYOLO_KERNELS", "alpha")
    assert kernels.dispatch(OP, 0) == "a"
    monkeypatch.setenv("LIBREYOLO_KERNELS", "gamma")  # nothing of that name: reference
    assert kernels.dispatch(OP, 0) == ("ref", 0)
    monkeypatch.delenv("LIBREYOLO_KERNELS")
    assert kernels.dispatch(OP, 0) == "b"


def test_quant_alias_read_only_when_main_variable_unset(reg, monkeypatch):
    kernels.register(OP, lambda x: "a", name="alpha")
    kernels.register(OP, lambda x: "b", name="beta")
    monkeypatch.setenv("LIBREYOLO_QUANT_KERNELS", "off")
    assert kernels.dispatch(OP, 0) == ("ref", 0)
    monkeypatch.setenv("LIBREYOLO_QUANT_KERNELS", "alpha")
    assert kernels.dispatch(OP, 0) == "a"
    monkeypatch.setenv("LIBREYOLO_KERNELS", "beta")  # the main variable wins
    assert kernels.dispatch(OP, 0) == "b"
    monkeypatch.setenv("LIBREYOLO_KERNELS", "")  # empty counts as unset
    assert kernels.dispatch(OP, 0) == "a"


def test_hub_flag(reg, monkeypatch):
    assert reg.hub_kernels_enabled()
    for value in ("0", "false", "OFF", "no"):
        monkeypatch.setenv("LIBREYOLO_HUB_KERNELS", value)
        assert not reg.hub_kernels_enabled()
    monkeypatch.setenv("LIBREYOLO_HUB_KERNELS", "1")
    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    assert not reg.hub_kernels_enabled()


def test_failing_impl_disables_itself_with_one_warning(reg):
    calls = []

    def flaky(x):
        calls.append(x)
        raise RuntimeError("no kernel image for this GPU")

    kernels.register(OP, flaky, name="hub")
    with pytest.warns(RuntimeWarning, match="disabled"):
        assert kernels.dispatch(OP, 1) == ("ref", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels.dispatch(OP, 2) == ("ref", 2)
    assert calls == [1]  # never retried
    assert kernels.active()[OP] == "reference"
    kernels.register(OP, lambda x: "fixed", name="hub")  # re-registering re-enables
    assert kernels.dispatch(OP, 3) == "fixed"


def test_caller_errors_are_not_swallowed(reg):
    def strict(x):
        raise ConfigError("bad input")

    kernels.register(OP, strict, name="strict")
    with pytest.raises(ConfigError, match="bad input"):
        kernels.dispatch(OP, 1)
    assert kernels.active()[OP] == "strict"  # not disabled


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"impl": _ref, "name": ""}, "name"),
        ({"impl": _ref, "name": None}, "name"),
        ({"impl": "not callable", "name": "x"}, "not callable"),
        ({"impl": _ref, "name": "off"}, "reserved"),
        ({"impl": _ref, "name": "x", "predicate": 3}, "predicate"),
    ],
)
def test_register_rejects_bad_input(reg, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        kernels.register(OP, **kwargs)


def test_unregister(reg):
    kernels.register(OP, lambda x: "fast", name="fast")
    kernels.unregister(OP, "fast")
    assert kernels.resolve(OP) is _ref
    with pytest.raises(ConfigError, match="no implementation 'fast'"):
        kernels.unregister(OP, "fast")
    with pytest.raises(ConfigError, match="unknown kernel op"):
        kernels.unregister("nope_op", "fast")


def test_out_of_tree_package_self_registers(reg, monkeypatch):
    """``libreyolo_kernels`` is imported once, lazily, and registers through the public API."""
    monkeypatch.setattr(reg, "_out_of_tree_done", False)
    real_import = reg.importlib.import_module
    imported = []

    def fake_import(name, *a, **k):
        if name == reg.OUT_OF_TREE_PACKAGE:
            imported.append(name)
            kernels.register(OP, lambda x: "oot", name="oot")
            return types.ModuleType(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(reg.importlib, "import_module", fake_import)
    assert kernels.dispatch(OP, 0) == "oot"
    assert kernels.dispatch(OP, 1) == "oot"
    assert imported == [reg.OUT_OF_TREE_PACKAGE]


def test_out_of_tree_not_imported_under_off(reg, monkeypatch):
    monkeypatch.setattr(reg, "_out_of_tree_done", False)
    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    real_import = reg.importlib.import_module
    imported = []
    monkeypatch.setattr(reg.importlib, "import_module",
                        lambda name, *a, **k: imported.append(name) or real_import(name, *a, **k))
    kernels.dispatch(OP, 0)
    kernels.active()
    assert imported == []


def test_broken_out_of_tree_package_warns(reg, monkeypatch):
    monkeypatch.setattr(reg, "_out_of_tree_done", False)
    real_import = reg.importlib.import_module

    def fake_import(name, *a, **k):
        if name == reg.OUT_OF_TREE_PACKAGE:
            raise AttributeError("half-installed")
        return real_import(name, *a, **k)

    monkeypatch.setattr(reg.importlib, "import_module", fake_import)
    with pytest.warns(RuntimeWarning, match="half-installed"):
        assert kernels.dispatch(OP, 0) == ("ref", 0)


def test_in_tree_quant_slots_declared():
    act = kernels.active()
    assert act["fake_quant_fp8"] in ("reference", "triton")
    assert act["fake_quant_int8"] in ("reference", "triton")
    assert act["unpack_weights"] in ("reference", "triton")
    if not torch.cuda.is_available():
        assert act["fp8_gemm"] == "unavailable"  # K-6 / K-10: no reference, CPU never engages it

"""Fixtures for the kernel-registry tests: isolated registry state and the Triton interpreter.

Triton runs its kernels on CPU tensors when ``TRITON_INTERPRET=1`` is set before the kernels are
defined (at ``@triton.jit`` time; some versions decide when ``triton`` is imported), so it is set
here, before anything below imports triton, on machines without CUDA only: a GPU run compiles
the kernels for real and checks them in ``tests/gpu``. ``test_interpret_subprocess.py`` runs the
same parity checks in a fresh process, which does not depend on import order.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from libreyolo.kernels import registry  # noqa: E402

_ENV = ("LIBREYOLO_KERNELS", "LIBREYOLO_QUANT_KERNELS", "LIBREYOLO_HUB_KERNELS")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch):
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    registry.clear_cache()
    yield
    registry.clear_cache()


@pytest.fixture
def isolated_registry():
    """Snapshot the registry's global state and restore it after the test.

    Providers are loaded first, so that registrations made by their (one-time) import are part
    of the snapshot and survive the restore.
    """
    registry._load_providers_all()
    saved = {
        "_slots": {k: (v.reference, v.reference_name, list(v.impls)) for k, v in registry._slots.items()},
        "_providers": {k: list(v) for k, v in registry._providers.items()},
        "_imported": set(registry._imported_providers),
        "_warned": set(registry._warned),
        "_disabled": set(registry._disabled),
        "_oot": registry._out_of_tree_done,
    }
    yield registry
    with registry._lock:
        registry._slots.clear()
        for k, (ref, ref_name, impls) in saved["_slots"].items():
            registry._slots[k] = registry._Slot(reference=ref, reference_name=ref_name, impls=impls)
        registry._providers.clear()
        registry._providers.update(saved["_providers"])
        registry._imported_providers.clear()
        registry._imported_providers.update(saved["_imported"])
        registry._warned.clear()
        registry._warned.update(saved["_warned"])
        registry._disabled.clear()
        registry._disabled.update(saved["_disabled"])
        registry._out_of_tree_done = saved["_oot"]
        registry._cache.clear()

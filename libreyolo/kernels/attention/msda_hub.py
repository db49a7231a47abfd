"""Hub provider of the ``ms_deform_attn`` slot (SPEC K-7, K-8, K-12).

The compiled CUDA forward and backward of Deformable DETR (Apache-2.0), published as
``kernels-community/deformable-detr`` and loaded at run time through the optional ``kernels``
package (``pip install "libreyolo[hub-kernels]"``). Nothing is vendored.

The kernel module exposes (checked against the repository's ``torch_binding.cpp``)::

    ms_deform_attn_forward(value, spatial_shapes, level_start_index, sampling_loc,
                           attn_weight, im2col_step: int) -> Tensor (B, Q, H*C)
    ms_deform_attn_backward(value, spatial_shapes, level_start_index, sampling_loc,
                            attn_weight, grad_output, im2col_step: int)
        -> [grad_value, grad_sampling_loc, grad_attn_weight]

Rules:

* Pinned: :data:`HUB_REVISION` is the one audited commit loaded (SPEC A-5). Set to ``None``
  the provider declines (nothing unpinned is ever fetched). Raising the pin = set the 40-hex
  commit and pass the CUDA parity test ``tests/gpu/test_attention_gpu.py`` with it (docs).
* Resolving the pin (:func:`default_loader`): ``kernels`` 0.11.7 to 0.13.x resolve a commit-SHA
  revision in ``get_kernel``; 0.14 to 0.16 reject one (``Invalid rev id``), so for those the
  build folder of this machine's variant is fetched with
  ``huggingface_hub.snapshot_download(repo, revision=pin, allow_patterns=["build/<variant>/*"])``
  and loaded with ``kernels.get_local_kernel``. Other versions are outside the optional extra's
  range (``pyproject.toml``) and decline with one warning.
* Eligible: CUDA tensors, all float32, eager only (declines under ``torch.jit`` tracing,
  ``torch.compile``, ``torch.export``, ONNX export); the uniform-points layout with float
  locations (the mixed-points and integer-index layouts fall through to the portable path).
* ``LIBREYOLO_HUB_KERNELS=0`` (false/off/no) disables it. Without the ``kernels`` package the
  predicate answers ``False`` before importing anything: no network request.
* Loading happens in the predicate on the first eligible call, never inside a CUDA-graph
  capture (a capture that finds it unloaded runs the next implementation).
* A load or run failure disables the provider for the process with one warning; the caller
  falls back (load: the next implementation; run: :class:`KernelFallback` -> portable path).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import itertools
import logging
import platform
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ... import env
from .. import registry
from ..context import eager_only, is_capturing
from . import KernelFallback

logger = logging.getLogger(__name__)

NAME = "hub"
OP = "ms_deform_attn"
HUB_REPO = "kernels-community/deformable-detr"
HUB_REVISION: str | None = "4d2393e5d7879f7cf68db04cc7c9c7342272bc05"
"""The audited commit of :data:`HUB_REPO` (40 hex digits, SPEC A-5: the revision upstream
audited). ``None`` would make the provider decline. See ``docs/attention-kernels.md`` ("Raising
the Hub pin")."""
PACKAGE_NAME = "deformable_detr"

KERNELS_SHA_REVISION = ((0, 11, 7), (0, 14, 0))
"""``kernels`` versions ``[low, high)`` whose ``get_kernel`` resolves a commit-SHA revision."""
KERNELS_SNAPSHOT = ((0, 14, 0), (0, 17, 0))
"""``kernels`` versions ``[low, high)`` that reject one: the snapshot fallback loads the pin."""

MAX_IM2COL_STEP = 64

HubLoader = Callable[[str, str], ModuleType]
"""``loader(repo_id, revision) -> module`` exposing the two functions above."""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


def kernels_version() -> tuple[int, ...] | None:
    """Installed ``kernels`` version as a 3-tuple (package metadata, no import), else ``None``."""
    try:
        return _version_tuple(importlib.metadata.version("kernels"))
    except importlib.metadata.PackageNotFoundError:
        return None


def build_variant() -> str:
    """This machine's build folder name in a kernel repository:
    ``torch{maj}{min}-cxx11-cu{ver}-{arch}-linux`` (e.g. ``torch27-cxx11-cu128-x86_64-linux``)."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    cuda = (torch.version.cuda or "").replace(".", "")
    if not cuda:
        raise RuntimeError(
            "this torch build has no CUDA: there is no compiled kernel variant for it"
        )
    return f"torch{major}{minor}-cxx11-cu{cuda}-{platform.machine()}-linux"


def load_loose_snapshot(repo_id: str, revision: str) -> ModuleType:
    """The snapshot fallback (SPEC A-5): download only ``build/<variant>/*`` of the pinned commit
    into the Hub cache, then load it as a local kernel."""
    from huggingface_hub import snapshot_download

    kernels = importlib.import_module("kernels")
    variant = build_variant()
    folder = snapshot_download(repo_id, revision=revision, allow_patterns=[f"build/{variant}/*"])
    return kernels.get_local_kernel(Path(folder), PACKAGE_NAME)


def default_loader(repo_id: str, revision: str) -> ModuleType:
    """Load the pinned commit through the ``kernels`` package (downloads into the Hub cache on
    first use): ``get_kernel(repo, revision=sha)`` where the installed version resolves a
    commit SHA (falling back to the snapshot if it answers ``Invalid rev id`` after all), the
    snapshot fallback where it rejects one, an error otherwise."""
    version = kernels_version()
    if version is None:
        raise ModuleNotFoundError("the optional 'kernels' package is not installed")
    (lo, hi), (slo, shi) = KERNELS_SHA_REVISION, KERNELS_SNAPSHOT
    if lo <= version < hi:
        kernels = importlib.import_module("kernels")
        try:
            return kernels.get_kernel(repo_id, revision=revision)
        except Exception as e:  # noqa: BLE001 - a release in this range that rejects a SHA after all
            if "invalid rev" not in str(e).lower() and type(e).__name__ != "RevisionNotFoundError":
                raise
            logger.debug("kernels %s rejected the commit pin (%r): snapshot fallback", version, e)
            return load_loose_snapshot(repo_id, revision)
    if slo <= version < shi:
        return load_loose_snapshot(repo_id, revision)
    raise RuntimeError(
        f"kernels {'.'.join(map(str, version))} is outside the supported range "
        f"{'.'.join(map(str, lo))} to <{'.'.join(map(str, shi))} "
        '(pip install "libreyolo[hub-kernels]" installs one inside it)'
    )


def local_loader(path: str | Path, *, package_name: str = PACKAGE_NAME) -> HubLoader:
    """A loader reading a local kernel repository instead of the Hub (auditing a snapshot on a
    machine without network). With a ``kernels`` release of the supported range installed it
    uses ``kernels.get_local_kernel(root, package_name)``; otherwise (no ``kernels``, or a release
    outside the range, whose ``get_local_kernel`` takes other arguments: 0.19 takes the folder
    only) it imports a pure-Python ``build/torch-universal/<package_name>/__init__.py``."""
    root = Path(path)

    def load(repo_id: str, revision: str) -> ModuleType:
        if _kernels_installed() and _in_supported_range(kernels_version()):
            kernels = importlib.import_module("kernels")
            return kernels.get_local_kernel(root, package_name)
        init = root / "build" / "torch-universal" / package_name / "__init__.py"
        if not init.is_file():
            raise FileNotFoundError(
                f"no kernel package at {init}; a local kernel folder needs "
                f"build/<variant>/{package_name}/__init__.py"
            )
        spec = importlib.util.spec_from_file_location(
            f"_libreyolo_local_kernel_{package_name}",
            init,
            submodule_search_locations=[str(init.parent)],
        )
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import the kernel package at {init}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@dataclass
class _State:
    loader: HubLoader | None = None  # None: default_loader through the `kernels` package
    revision: str | None = None  # None: HUB_REVISION
    devices: frozenset[str] = frozenset({"cuda"})
    module: ModuleType | None = None


_state = _State()
_lock = threading.Lock()


def configure(
    *,
    loader: HubLoader | None = None,
    revision: str | None = None,
    devices: frozenset[str] = frozenset({"cuda"}),
) -> None:
    """Replace the loader and/or revision (tests, audits of a candidate pin) and forget any
    loaded module. ``devices`` widens eligibility for tests with a pure-PyTorch local kernel;
    production code leaves it at CUDA."""
    with _lock:
        _state.loader, _state.revision, _state.devices = loader, revision, frozenset(devices)
        _state.module = None
    registry.clear_cache()


def _in_supported_range(version: tuple[int, ...] | None) -> bool:
    """Whether ``version`` is in the optional extra's range (either resolution path)."""
    if version is None:
        return False
    (lo, hi), (slo, shi) = KERNELS_SHA_REVISION, KERNELS_SNAPSHOT
    return lo <= version < hi or slo <= version < shi


def revision() -> str | None:
    return _state.revision if _state.revision is not None else HUB_REVISION


def _package_ready() -> bool:
    """Can a load be attempted? Never imports anything (no network)."""
    if revision() is None:
        return False
    return _state.loader is not None or _kernels_installed()


def _kernels_installed() -> bool:
    """Is the optional ``kernels`` package installed? A bare folder named ``kernels`` on the path
    (a namespace package, e.g. a test directory) does not count."""
    try:
        spec = importlib.util.find_spec("kernels")
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None


def loaded() -> ModuleType | None:
    return _state.module


def _load() -> ModuleType | None:
    """Load once; on failure disable the provider for the process (one warning)."""
    with _lock:
        if _state.module is not None:
            return _state.module
        rev = revision()
        loader = _state.loader or default_loader
        try:
            module = loader(HUB_REPO, rev)  # type: ignore[arg-type]
            for fn in ("ms_deform_attn_forward", "ms_deform_attn_backward"):
                if not callable(getattr(module, fn, None)):
                    raise AttributeError(f"{HUB_REPO}@{rev} has no function {fn}")
        except Exception as e:  # noqa: BLE001 - K-7: a kernel that fails to load falls back
            registry.disable(OP, NAME, f"failed to load {HUB_REPO}@{rev}: {e!r}")
            return None
        _state.module = module
    logger.debug("kernel %s: loaded %s@%s", OP, HUB_REPO, rev)
    return module


def applies(
    value: Tensor | None = None,
    spatial_shapes: Tensor | None = None,
    level_start_index: Tensor | None = None,
    sampling_locations: Tensor | None = None,
    attention_weights: Tensor | None = None,
) -> bool:
    """Predicate of the ``"hub"`` implementation (module docstring). With no arguments it says
    whether the provider could run on this machine, without loading anything."""
    if not env.get_flag("LIBREYOLO_HUB_KERNELS") or not eager_only() or not _package_ready():
        return False
    if value is None:
        return torch.cuda.is_available() or bool(_state.devices - {"cuda"})
    tensors = (value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
    if any(not isinstance(t, Tensor) for t in tensors):
        return False
    if value.device.type not in _state.devices or any(t.device != value.device for t in tensors):
        return False
    if value.dim() != 4 or sampling_locations.dim() != 6 or attention_weights.dim() != 5:
        return False  # different point counts per level
    if any(t.dtype != torch.float32 for t in (value, sampling_locations, attention_weights)):
        return False  # float32 only; integer-index sampling is not float32 either
    if spatial_shapes.dtype != torch.int64 or level_start_index.dtype != torch.int64:
        return False
    if _state.module is None:
        if is_capturing():
            return False  # K-12: never load or fetch inside a capture
        return _load() is not None
    return True


def im2col_step(batch: int) -> int:
    """Largest divisor of ``batch`` not above 64 (the kernel requires ``batch % step == 0``)."""
    return max(d for d in range(1, min(batch, MAX_IM2COL_STEP) + 1) if batch % d == 0)


def _portable_grads(inputs: tuple[Tensor, ...], grad_out: Tensor) -> tuple[Tensor, ...]:
    from .msda_ref import ms_deform_attn_portable

    value, shapes, _, loc, attw = inputs
    sizes = [tuple(int(x) for x in hw) for hw in shapes.tolist()]  # host sync: failure path only
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in (value, loc, attw)]
        out = ms_deform_attn_portable(leaves[0], sizes, leaves[1], leaves[2])
        return torch.autograd.grad(out, leaves, grad_out)


class _MSDeformAttnHub(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, value, spatial_shapes, level_start_index, sampling_locations, attention_weights
    ):  # type: ignore[override]
        module = _state.module
        inputs = tuple(
            t.contiguous()
            for t in (
                value,
                spatial_shapes,
                level_start_index,
                sampling_locations,
                attention_weights,
            )
        )
        step = im2col_step(value.shape[0])
        ctx.step = step
        ctx.save_for_backward(*inputs)
        return module.ms_deform_attn_forward(*inputs, step)  # type: ignore[union-attr]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        inputs = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        try:
            gv, gl, gw = _state.module.ms_deform_attn_backward(*inputs, grad_out, ctx.step)  # type: ignore[union-attr]
        except Exception as e:  # noqa: BLE001 - K-7: disable, then portable gradients
            registry.disable(OP, NAME, f"backward raised {e!r}")
            if is_capturing():
                raise KernelFallback(
                    f"Hub kernel {HUB_REPO} failed inside a CUDA-graph capture ({e!r}); it is "
                    "now disabled, capture again (or set LIBREYOLO_HUB_KERNELS=0)"
                ) from e
            gv, gl, gw = _portable_grads(inputs, grad_out)
        need = ctx.needs_input_grad
        return (
            gv if need[0] else None,
            None,
            None,
            gl if need[3] else None,
            gw if need[4] else None,
        )


def ms_deform_attn_hub(
    value: Tensor,
    spatial_shapes: Tensor,
    level_start_index: Tensor,
    sampling_locations: Tensor,
    attention_weights: Tensor,
) -> Tensor:
    """Run the Hub kernel (autograd through its compiled backward). A failure disables the
    provider and raises :class:`KernelFallback` for the caller's portable path."""
    if _state.module is None:
        raise KernelFallback(f"Hub kernel {HUB_REPO} is not loaded")
    try:
        return _MSDeformAttnHub.apply(
            value, spatial_shapes, level_start_index, sampling_locations, attention_weights
        )
    except Exception as e:  # noqa: BLE001 - K-7: disable for the process, caller falls back
        registry.disable(OP, NAME, f"raised {e!r}")
        raise KernelFallback(f"Hub kernel {HUB_REPO} failed: {e!r}") from e


registry.register(OP, ms_deform_attn_hub, name=NAME, predicate=applies)

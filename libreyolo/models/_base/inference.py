"""The prepared inference model: what ``predict()`` runs.

A :class:`~libreyolo.models._base.family.Family` keeps its network trainable (BatchNorms,
re-parameterisable branches, fp32 weights). Prediction runs a *prepared twin* of it instead:

* fused (BatchNorm folded into convolutions, RepConv branches merged) unless ``fuse=False``;
* cast once to the half dtype (``float16`` on CUDA, ``bfloat16`` elsewhere) when ``half=True``,
  so no weight is re-cast per call (autocast with its weight cache off re-cast every weight on
  every call and made fp16 slower than fp32); a family with ``HALF_CAST = False`` keeps fp32
  weights and ``predict`` runs it under autocast as before;
* in channels-last memory format where the family measured that it wins
  (``Family.INFER_CHANNELS_LAST``; on CUDA only).

The twin is a shallow copy of the family object with its own deep-copied network (its
backend, :class:`~libreyolo.backends.torch.TorchBackend`, gives it CUDA graphs of its own), so training, ``save()`` and ``state_dict`` keep seeing the original network. When
nothing needs preparing (``fuse=False`` or already fused, fp32, no layout change) the model is
its own twin and no memory is spent.

The twin is rebuilt when it could be stale: the original network's tensors were updated in place
(their ``_version`` counters move: a training step, ``load_weights``), its parameters were
relocated or replaced, or the device changed. Graph parity is defined on the twin: its captured
replay must equal its own eager forward bit for bit.
"""

from __future__ import annotations

import copy
import logging
import operator
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from .family import Family

logger = logging.getLogger(__name__)
_VERSION = operator.attrgetter("_version")
SAMPLE = 32  # tensors whose version counters the staleness check reads


@dataclass(frozen=True, kw_only=True)
class PrepSpec:
    """How the twin is prepared: fused or not, its weight dtype, its memory format, its device."""

    fuse: bool
    dtype: torch.dtype
    channels_last: bool
    device: str


def half_dtype(device: torch.device) -> torch.dtype:
    """The dtype ``half=True`` means on ``device``: float16 on CUDA, bfloat16 elsewhere (CPU
    kernels are fast and safe in bfloat16, not in float16)."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def twin_channels_last(model: Any, dtype: torch.dtype) -> bool:
    """Whether a family's twin with ``dtype`` weights runs channels-last (on CUDA): its
    ``HALF_CHANNELS_LAST`` for a half dtype where set, else ``INFER_CHANNELS_LAST``."""
    half = getattr(model, "HALF_CHANNELS_LAST", None)
    if dtype != torch.float32 and half is not None:
        return bool(half)
    return bool(model.INFER_CHANNELS_LAST)


def uses_graph_bias_act(model: Any) -> bool:
    """Whether prediction graphs of ``model`` (a prepared twin) capture the fused conv epilogue:
    ``GRAPH_BIAS_ACT`` is True, or ``"channels_last"`` and the twin is channels-last."""
    flag = getattr(model, "GRAPH_BIAS_ACT", False)
    if flag == "channels_last":
        return channels_last(model)
    return bool(flag)


def prep_spec(model: Family, *, half: bool, fuse: bool) -> PrepSpec:
    device = model.device
    cast = half and model.HALF_CAST
    dtype = half_dtype(device) if cast else torch.float32
    return PrepSpec(fuse=bool(fuse) and not model.fused, dtype=dtype,
                    channels_last=twin_channels_last(model, dtype) and device.type == "cuda",
                    device=str(device))


def _chain(net: nn.Module, path: str) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, child name, child) from ``net`` down to the submodule at ``path``."""
    links, mod = [], net
    for name in path.split(".") if path else []:
        child = mod._modules[name]
        links.append((mod, name, child))
        mod = child
    return links


class Fingerprint:
    """Cheap proof that a network's weights did not change since it was taken.

    Holds an evenly spaced sample of the network's floating parameter and buffer tensors (plus
    the last one, and the first and last parameters); stale when one of them was modified in place through autograd-visible ops (``Tensor._version`` moved: optimizer steps,
    ``load_state_dict``, ``with torch.no_grad(): p.add_(...)``) or when the module tree now holds
    different tensors or modules at the first or last parameter slot (replaced parameters, a
    replaced head). Writes through
    ``p.data`` bypass the version counter and a replaced parameter in the middle of the network is
    not seen, nor an in-place edit of a tensor outside the sample: after such edits call
    ``model.invalidate_graphs(reason)`` (or load the weights with ``model.load_weights``), which
    drops the twin. Cost: about 35 version-counter reads and two short chains of dict reads per call.
    """

    def __init__(self, net: nn.Module) -> None:
        self.net = net
        # An evenly spaced sample of the floating parameters and buffers (integer buffers such as
        # num_batches_tracked move with the running stats): optimizer steps and load_state_dict
        # update every tensor, so a sample sees them at a fraction of the cost of the whole list
        # (about 1,300 tensors in yolo9-t: 0.2 ms per call on a slow host, now a few microseconds).
        every = [t for t in (*net.parameters(), *net.buffers()) if t.is_floating_point()]
        step = max(1, len(every) // SAMPLE)
        owners = [(path, m, n, p) for path, m in net.named_modules() for n, p in m._parameters.items()
                  if p is not None]
        self.ends = [owners[0], owners[-1]] if owners else []
        self.chains = [(_chain(net, path), m, n, p) for path, m, n, p in self.ends]
        # the first and last parameters are always read too: the last is a head's weight in most
        # families (e.g. a zero-shot head's class embeddings, re-set in place)
        self.tensors = every[::step] + every[-1:] + [p for *_, p in self.ends if p.is_floating_point()]
        self.version = self._version()

    def _version(self) -> int:
        return sum(map(_VERSION, self.tensors))

    def stale(self, net: nn.Module) -> bool:
        if net is not self.net or self._version() != self.version:
            return True
        # replaced parameters, or a replaced module holding one (e.g. a new class head): the chain
        # of modules from the root to each end is checked link by link (dict reads, no path walk)
        for chain, m, n, p in self.chains:
            for parent, name, child in chain:
                if parent._modules.get(name) is not child:
                    return True
            if m._parameters.get(n) is not p:
                return True
        return False


def build_twin(model: Family, spec: PrepSpec) -> Family:
    """A prepared copy of ``model`` per ``spec`` (or ``model`` itself when nothing changes)."""
    if not spec.fuse and spec.dtype == torch.float32 and not spec.channels_last:
        return model
    if model.quant is not None:  # quantized modules own their own weight formats
        return model
    twin = copy.copy(model)
    net = copy.deepcopy(model.net).eval()
    for p in net.parameters():
        p.requires_grad_(False)
    twin.net = net
    if spec.fuse:
        fuse = getattr(net, "fuse", None)
        if fuse is not None:
            fuse()
        twin.fused = True
    if spec.dtype != torch.float32:
        net.to(spec.dtype)
    if spec.channels_last:
        net.to(memory_format=torch.channels_last)
    twin.is_twin = True
    twin.prep_spec = spec
    logger.debug("prepared %s-%s for inference: fused=%s dtype=%s channels_last=%s", model.FAMILY,
                 model.size, twin.fused, spec.dtype, spec.channels_last)
    return twin


def input_dtype(model: Family) -> torch.dtype:
    """The dtype a prepared model's network expects its input in (its first floating parameter's;
    a twin's spec says it without walking the module tree: the whole network was cast to it)."""
    spec = getattr(model, "prep_spec", None)
    if spec is not None:
        return spec.dtype
    for p in model.net.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def channels_last(model: Family) -> bool:
    """Whether ``model`` (a prepared twin) was put in channels-last format, as its spec says (not
    guessed from a weight, whose strides are ambiguous for 1x1 and depthwise kernels)."""
    spec = getattr(model, "prep_spec", None)
    return bool(spec is not None and spec.channels_last)


def cudnn_benchmark(device: torch.device) -> Any:
    """Context: cuDNN autotuning on for a prediction call (conv algorithms measured once per
    shape and cached process-wide, so eager and captured calls pick the same algorithm).

    ``torch.backends.cudnn.benchmark`` is process-wide: the first of any number of concurrent
    prediction calls turns it on, the last one out restores the caller's value (a counter under a
    lock), so threads predicting at once cannot leave it switched on for later training."""
    import contextlib

    if device.type != "cuda":
        return contextlib.nullcontext()
    return _BENCHMARK


class _Benchmark:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.prev = False

    def __enter__(self) -> None:
        with self.lock:
            if self.users == 0:
                self.prev = torch.backends.cudnn.benchmark
                torch.backends.cudnn.benchmark = True
            self.users += 1

    def __exit__(self, *exc: Any) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                torch.backends.cudnn.benchmark = self.prev


_BENCHMARK = _Benchmark()

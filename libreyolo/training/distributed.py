"""Distributed data-parallel (DDP) training helpers, on PyTorch's own engine.

Two ways into a distributed run, both ending in the same trainer code:

* ``model.train(device="0,1", ...)`` (or ``libreyolo train ... device=0,1``) in a plain process:
  :func:`libreyolo.training.launch.launch_training` starts ``torch.distributed.run`` (torchrun)
  with one worker process per device.
* a user script started under ``torchrun``: ``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` are set and the
  trainer joins that world itself (:func:`setup_distributed`).

Device strings (:func:`parse_devices`): ``"0,1,2,3"`` = those CUDA devices, one process each;
``"cpu"`` with ``world_size=N`` = N CPU processes on the gloo backend (tests, debugging);
``"0"``, ``"cuda:1"``, ``"cuda"``, ``None`` = one device, no DDP unless already under torchrun.

Conventions (see docs/distributed.md): ``batch`` is the total batch over all processes and is
divided by the world size; rank 0 alone validates, writes checkpoints, logs and draws progress
bars; every rank keeps its own (identical) EMA; gradients are averaged by DDP (or, for a captured
training step, whose forward bypasses the DDP wrapper, by :class:`GradientReducer` with DDP's
arithmetic) and the loss is multiplied by the world size so the optimiser sees the
single-process gradient scale.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import ConfigError

logger = logging.getLogger(__name__)

# environment variables torchrun sets in each worker
ENV_KEYS = ("WORLD_SIZE", "RANK", "LOCAL_RANK")


@dataclass(frozen=True, kw_only=True)
class DevicePlan:
    """What a ``device`` argument asks for: ``world_size`` processes on ``devices`` (CUDA ids), or on the CPU."""

    world_size: int
    cuda: bool
    devices: tuple[int, ...] = ()

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _bad(device: Any, why: str) -> ConfigError:
    return ConfigError(f"invalid device {device!r}: {why}; use e.g. device='0', device='0,1,2,3' (one DDP process "
                       "per GPU) or device='cpu' (with world_size=N for N CPU processes)")


def parse_devices(device: str | int | None, *, world_size: int = 0) -> DevicePlan:
    """Parse a training ``device`` argument and the optional ``world_size`` key.

    Does not check that the devices exist (see :func:`check_devices_present`).

    Example:
        >>> parse_devices("0,1")
        DevicePlan(world_size=2, cuda=True, devices=(0, 1))
        >>> parse_devices("cpu", world_size=2).world_size
        2
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 0:
        raise ConfigError(f"world_size must be an int >= 0 (0 = one process per listed device), got {world_size!r}")
    if isinstance(device, bool):
        raise _bad(device, "a bool is not a device")
    if isinstance(device, int):
        device = str(device)
    if device is not None and not isinstance(device, str):
        raise _bad(device, "expected a string")
    text = (device or "").strip().lower().replace(" ", "")
    if text in ("", "cuda"):
        n = max(world_size, 1)
        if text == "" and n > 1 and not torch.cuda.is_available():
            return DevicePlan(world_size=n, cuda=False)
        return DevicePlan(world_size=n, cuda=True, devices=tuple(range(n)) if n > 1 else ())
    if text == "cpu":
        return DevicePlan(world_size=max(world_size, 1), cuda=False)
    if text.startswith("cuda:"):
        text = text[5:]
    items = text.split(",")
    if len(items) == 1 and not text.isdigit():  # another single device ('mps', ...): select_device decides
        if world_size > 1:
            raise _bad(device, f"world_size={world_size} needs CUDA GPUs or the CPU")
        return DevicePlan(world_size=1, cuda=False)
    if not all(i.isdigit() for i in items):
        raise _bad(device, "expected 'cpu', 'cuda', 'cuda:N' or comma-separated GPU indices")
    ids = tuple(int(i) for i in items)
    if len(set(ids)) != len(ids):
        raise _bad(device, "a GPU is listed twice")
    if world_size and world_size != len(ids):
        raise ConfigError(f"world_size={world_size} does not match device={device!r} ({len(ids)} GPU(s)); "
                          "leave world_size out: one process runs per listed GPU")
    return DevicePlan(world_size=len(ids), cuda=True, devices=ids)


def check_devices_present(plan: DevicePlan) -> None:
    """Raise :class:`ConfigError` when ``plan`` names CUDA devices this machine does not have."""
    if not plan.cuda:
        return
    if not torch.cuda.is_available():
        raise ConfigError(f"{plan.world_size} CUDA device(s) requested but torch sees no CUDA GPU; "
                          "use device='cpu' (with world_size=N for a CPU DDP run)")
    n = torch.cuda.device_count()
    missing = [i for i in plan.devices if i >= n]
    if missing:
        raise ConfigError(f"device(s) {missing} requested but only {n} CUDA device(s) are present")


def in_torchrun_world() -> bool:
    """True inside a process started by torchrun (``WORLD_SIZE`` is set)."""
    return "WORLD_SIZE" in os.environ


@dataclass(frozen=True, kw_only=True)
class DistContext:
    """This process's place in a distributed run."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str
    owns_group: bool  # True when the trainer initialised the process group (and destroys it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str | int | None, *, world_size: int = 0) -> DistContext | None:
    """Join the torchrun world this process belongs to, or return None outside one.

    Outside torchrun (or with ``WORLD_SIZE=1``) nothing happens. Inside, the device is
    ``cuda:<listed[LOCAL_RANK]>`` for a GPU list, ``cuda:LOCAL_RANK`` for ``None``/``"cuda"``
    (``"cpu"`` when no GPU exists and none was asked for), the CPU for ``"cpu"``; the backend is
    nccl on CUDA and gloo on the CPU. An already initialised process group (a script that called
    ``init_process_group`` itself) is used as it is and left for its owner to destroy.
    """
    if not in_torchrun_world():
        return None
    try:
        ws, rank, local = (int(os.environ.get(k, "0")) for k in ENV_KEYS)
    except ValueError as e:
        raise ConfigError(f"malformed torchrun environment ({', '.join(ENV_KEYS)}): {e}") from e
    if ws <= 1:
        return None
    if world_size and world_size != ws:
        raise ConfigError(f"world_size={world_size} but this torchrun world has {ws} processes; drop world_size")
    text = (str(device) if device is not None else "").strip().lower()
    if text == "cpu":
        dev = torch.device("cpu")
    else:
        plan = parse_devices(device)
        if plan.devices and len(plan.devices) > 1:
            if local >= len(plan.devices):
                raise ConfigError(f"device={device!r} lists {len(plan.devices)} GPU(s) but LOCAL_RANK is {local}; "
                                  "list one GPU per process on this node")
            idx = plan.devices[local]
        else:
            idx = local
        if text == "" and not torch.cuda.is_available():
            dev = torch.device("cpu")
        else:
            check_devices_present(DevicePlan(world_size=1, cuda=True, devices=(idx,)))
            dev = torch.device("cuda", idx)
            torch.cuda.set_device(dev)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group(backend=backend, rank=rank, world_size=ws)
    else:
        backend = str(dist.get_backend())
    logger.info("DDP rank %d/%d (local %d) on %s, backend %s", rank, ws, local, dev, backend)
    return DistContext(rank=rank, local_rank=local, world_size=ws, device=dev, backend=backend, owns_group=owns)


def cleanup_distributed(ctx: DistContext | None) -> None:
    """Destroy the process group if :func:`setup_distributed` created it (safe to call twice)."""
    if ctx is not None and ctx.owns_group and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(obj: Any, ctx: DistContext | None) -> Any:
    """Rank 0's ``obj`` on every rank (a collective: every rank must call it)."""
    if ctx is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, device=ctx.device if ctx.backend == "nccl" else None)
    return box[0]


def all_true(flag: bool, ctx: DistContext | None) -> bool:
    """True when ``flag`` is true on every rank (a collective)."""
    if ctx is None:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def barrier(ctx: DistContext | None) -> None:
    if ctx is not None:
        if ctx.backend == "nccl":
            dist.barrier(device_ids=[ctx.device.index])
        else:
            dist.barrier()


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over a state dict's names and exact tensor bytes (to compare replicas)."""
    h = hashlib.sha256()
    for name, t in sorted(state.items()):
        h.update(name.encode())
        if t.numel():
            h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def parameter_digest(module: nn.Module) -> str:
    """:func:`state_digest` of the parameters of ``module``.

    Buffers are left out: DDP broadcasts rank 0's buffers (BatchNorm running statistics) at the
    start of every forward, so after the last forward each rank holds its own batch's statistics
    (rank 0's are the ones saved).
    """
    return state_digest(dict(module.named_parameters()))


def gather_digests(module: nn.Module, ctx: DistContext | None) -> list[str]:
    """Every rank's :func:`parameter_digest` of ``module``, in rank order (a collective)."""
    own = parameter_digest(module)
    if ctx is None:
        return [own]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, own)
    return [str(d) for d in out]


BUCKET_BYTES = 25 * 1024 * 1024  # DDP's default bucket size


class GradientReducer:
    """Average the gradients of ``net`` over the ranks, as DDP's reducer does, for a forward that
    bypassed the DDP wrapper (the captured training step: SPEC A-6's second option, collectives
    outside the graphs).

    The gradients (``requires_grad`` parameters that have one, ``net.parameters()`` order) are
    packed into flat buckets of at most :data:`BUCKET_BYTES` per dtype, each scaled by
    ``1 / world_size`` and summed with one ``all_reduce``: DDP's arithmetic (it multiplies each
    gradient by ``1 / world_size`` while copying it into its bucket, then sums), so for a
    power-of-two world the averaged gradients are bit-identical to DDP's. Every rank must call it
    at the same step with the same parameters holding gradients (the same network and code path
    guarantee that).

    Example:
        >>> r = GradientReducer(nn.Linear(2, 1), world_size=1)
        >>> r()  # outside a process group (world size 1): nothing to do
        0
    """

    def __init__(self, net: nn.Module, *, world_size: int, group: Any = None) -> None:
        self.net, self.world_size, self.group = net, int(world_size), group
        self.params = [p for p in net.parameters() if p.requires_grad]

    def __call__(self) -> int:
        """All-reduce the gradients in place; returns the number of buckets sent."""
        if self.world_size == 1:
            return 0
        grads = [p.grad for p in self.params if p.grad is not None]
        buckets: list[list[torch.Tensor]] = []
        open_: dict[tuple[torch.dtype, torch.device], tuple[list[torch.Tensor], list[int]]] = {}
        for g in grads:
            key = (g.dtype, g.device)
            bucket, size = open_.setdefault(key, ([], [0]))
            if bucket and size[0] + g.numel() * g.element_size() > BUCKET_BYTES:
                buckets.append(bucket)
                bucket, size = open_[key] = ([], [0])
            bucket.append(g)
            size[0] += g.numel() * g.element_size()
        buckets.extend(b for b, _ in open_.values() if b)
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        for bucket in buckets:
            flat = _flatten_dense_tensors(bucket)
            flat.mul_(1.0 / self.world_size)
            dist.all_reduce(flat, group=self.group)
            torch._foreach_copy_(bucket, list(_unflatten_dense_tensors(flat, bucket)))
        return len(buckets)


def convert_sync_batchnorm(net: nn.Module) -> nn.Module:
    """BatchNorm layers -> :class:`torch.nn.SyncBatchNorm` (statistics over the global batch)."""
    return nn.SyncBatchNorm.convert_sync_batchnorm(net)


def revert_sync_batchnorm(module: nn.Module) -> nn.Module:
    """The inverse of :func:`convert_sync_batchnorm`: plain ``BatchNorm2d`` layers, same state.

    Applied after training so the returned model fuses, exports and runs outside a process group.
    """
    out = module
    if isinstance(module, nn.SyncBatchNorm):
        out = nn.BatchNorm2d(module.num_features, eps=module.eps, momentum=module.momentum, affine=module.affine,
                             track_running_stats=module.track_running_stats,
                             device=module.running_mean.device if module.running_mean is not None else None)
        out.load_state_dict(module.state_dict())
        out.train(module.training)
    for name, child in module.named_children():
        new = revert_sync_batchnorm(child)
        if new is not child:
            setattr(out, name, new)
    return out


def wrap_ddp(net: nn.Module, ctx: DistContext, *, find_unused_parameters: bool = False) -> nn.Module:
    """``DistributedDataParallel(net)``; its constructor broadcasts rank 0's parameters and buffers."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(net, device_ids=ids, output_device=ids[0] if ids else None,
                                   find_unused_parameters=find_unused_parameters)


class Distributed:
    """The trainer's place in a distributed run, and the DDP steps it takes; outside a torchrun
    world (``ctx`` None) every method is the single-process no-op.

    Constructed with this process's :class:`DistContext` (:meth:`join` joins the world);
    it owns that context and the process group it may have created (:meth:`close`).
    """

    def __init__(self, ctx: DistContext | None = None) -> None:
        self.ctx = ctx

    @classmethod
    def join(cls, device: str | int | None, *, world_size: int = 0) -> Distributed:
        """:func:`setup_distributed` for the run's ``device`` / ``world_size``."""
        return cls(setup_distributed(device, world_size=world_size))

    @property
    def is_main(self) -> bool:
        """Rank 0 of a DDP run, or the only process: validates, saves, logs."""
        return self.ctx is None or self.ctx.is_main

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (:func:`broadcast_object`)."""
        return broadcast_object(obj, self.ctx)

    def sync_batchnorm(self, model: Any, *, device: torch.device) -> None:
        """``sync_bn=True``: ``model.net``'s BatchNorm layers become SyncBatchNorm under DDP on CUDA
        (a warning on other devices; nothing outside DDP)."""
        if self.ctx is None:
            return
        if device.type == "cuda":
            model.net = convert_sync_batchnorm(model.net)
        else:
            logger.warning("sync_bn=True ignored: SyncBatchNorm needs CUDA devices (this run is on %s)", device)

    def wrap(self, net: nn.Module) -> nn.Module:
        """What the loop calls: ``DistributedDataParallel(net)`` under DDP, else ``net`` itself."""
        return wrap_ddp(net, self.ctx) if self.ctx is not None else net

    def reduce_gradients(self, net: nn.Module) -> None:
        """Average ``net``'s gradients over the ranks (:class:`GradientReducer`, made once per
        network) after a backward that bypassed the DDP wrapper; nothing outside DDP."""
        if self.ctx is None:
            return
        r = getattr(self, "_reducer", None)
        if r is None or r.net is not net:
            r = self._reducer = GradientReducer(net, world_size=self.ctx.world_size)
        r()

    def check_replicas(self, net: nn.Module) -> list[str]:
        """After training: every rank's parameter digest (:func:`gather_digests`), which must agree;
        then a barrier, so rank 0's files are complete. ``[]`` outside DDP."""
        if self.ctx is None:
            return []
        digests = gather_digests(net, self.ctx)
        if len(set(digests)) != 1:
            raise RuntimeError(f"DDP replicas diverged (parameter digests {digests}); "
                               "please report this with the run's args.yaml")
        barrier(self.ctx)
        return digests

    def plain_batchnorm(self, model: Any) -> bool:
        """After training: SyncBatchNorm layers of ``model.net`` back to BatchNorm2d
        (:func:`revert_sync_batchnorm`); True when ``model.net`` was replaced."""
        if self.ctx is not None and any(isinstance(m, nn.SyncBatchNorm) for m in model.net.modules()):
            model.net = revert_sync_batchnorm(model.net)
            return True
        return False

    def close(self) -> None:
        """Destroy the process group if :meth:`join` created it (:func:`cleanup_distributed`)."""
        cleanup_distributed(self.ctx)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for the rendezvous of a local run)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

"""In-tree Triton provider of the ``ms_deform_attn`` slot: forward *and* backward.

Importing this module registers the implementation ``"triton"`` (the registry imports it lazily
on first use of the slot; an ImportError of ``triton`` simply leaves the slot without it).

Contract (the standard layout of :mod:`libreyolo.layers.msda`, portable path :mod:`.msda_ref`)::

    value               (B, S, H, C)          float16 / bfloat16 / float32 (/ float64)
    spatial_shapes      (L, 2) int64 (h, w)   same device
    level_start_index   (L,)   int64          same device
    sampling_locations  (B, Q, H, L, P, 2)    float, (x, y) in [0, 1]
    attention_weights   (B, Q, H, L, P)       float
    -> (B, Q, H*C) in value.dtype

Numerics: samples are accumulated in float32 (float64 for float64 inputs) whatever the input
dtype; the summation order differs from ``grid_sample`` + ``sum``, so the forward matches the
portable path to rounding, not bit for bit (tolerances in ``docs/attention-kernels.md``).
The backward accumulates the value gradient with atomic adds into a float32 buffer: the order
of those additions is not fixed, so value gradients are not bitwise reproducible run to run
(differences of a few ULP; a CUDA graph replays the same kernels with the same property).
Location and weight gradients are written without atomics and are deterministic.

Eligibility (the predicate): CUDA tensors (or CPU tensors under ``TRITON_INTERPRET=1`` when the
provider is asked for by name, ``LIBREYOLO_KERNELS=triton``: the interpreter runs the kernels in
Python, about a hundred times slower than the portable path, so it is a way to test them and
never picked by itself; an RT-DETR forward at 64 px took 23 s under it against 0.2 s), plain
eager execution (declines under ``torch.jit`` tracing, ``torch.compile``, ``torch.export`` and
ONNX export), float sampling locations in the 6-D uniform-points layout, supported dtypes.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable

from .. import registry
from ..context import eager_only

logger = logging.getLogger(__name__)

NAME = "triton"
OP = "ms_deform_attn"
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _fwd(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attw_ptr, out_ptr,
    S, Q,
    NH: tl.constexpr, C: tl.constexpr, L: tl.constexpr, P: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    pid_q = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_c = tl.arange(0, BLOCK_C)
    mask_q = offs_q < Q
    mask_c = offs_c < C
    row = (b * Q + offs_q) * NH + h  # (BLOCK_Q,) int64: index of (b, q, h)
    acc = tl.zeros((BLOCK_Q, BLOCK_C), dtype=ACC)
    for lvl in tl.static_range(L):
        hl = tl.load(shapes_ptr + 2 * lvl).to(tl.int32)
        wl = tl.load(shapes_ptr + 2 * lvl + 1).to(tl.int32)
        start = tl.load(starts_ptr + lvl).to(tl.int64)
        for pt in tl.static_range(P):
            idx = row * (L * P) + (lvl * P + pt)
            lx = tl.load(loc_ptr + 2 * idx, mask=mask_q, other=0.0).to(ACC)
            ly = tl.load(loc_ptr + 2 * idx + 1, mask=mask_q, other=0.0).to(ACC)
            aw = tl.load(attw_ptr + idx, mask=mask_q, other=0.0).to(ACC)
            # pixel coordinates (align_corners=False), clamped so the int cast cannot overflow
            x = tl.minimum(tl.maximum(lx * wl - 0.5, -2.0), wl + 1.0)
            y = tl.minimum(tl.maximum(ly * hl - 0.5, -2.0), hl + 1.0)
            x0f = tl.floor(x)
            y0f = tl.floor(y)
            fx = x - x0f
            fy = y - y0f
            x0 = x0f.to(tl.int32)
            y0 = y0f.to(tl.int32)
            for corner in tl.static_range(4):
                dx = corner % 2
                dy = corner // 2
                xx = x0 + dx
                yy = y0 + dy
                cwx = fx if dx == 1 else 1.0 - fx
                cwy = fy if dy == 1 else 1.0 - fy
                ok = mask_q & (xx >= 0) & (xx < wl) & (yy >= 0) & (yy < hl)
                pos = (b * S + start + (yy * wl + xx).to(tl.int64)) * NH + h
                ptrs = value_ptr + pos[:, None] * C + offs_c[None, :]
                v = tl.load(ptrs, mask=ok[:, None] & mask_c[None, :], other=0.0).to(ACC)
                acc += (aw * cwx * cwy)[:, None] * v
    out_ptrs = out_ptr + row[:, None] * C + offs_c[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask_q[:, None] & mask_c[None, :])


def _bwd(
    value_ptr, shapes_ptr, starts_ptr, loc_ptr, attw_ptr, gout_ptr,
    gvalue_ptr, gloc_ptr, gattw_ptr,
    S, Q,
    NH: tl.constexpr, C: tl.constexpr, L: tl.constexpr, P: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    pid_q = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    offs_q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_c = tl.arange(0, BLOCK_C)
    mask_q = offs_q < Q
    mask_c = offs_c < C
    mask_qc = mask_q[:, None] & mask_c[None, :]
    row = (b * Q + offs_q) * NH + h
    g = tl.load(gout_ptr + row[:, None] * C + offs_c[None, :], mask=mask_qc, other=0.0).to(ACC)
    for lvl in tl.static_range(L):
        hl = tl.load(shapes_ptr + 2 * lvl).to(tl.int32)
        wl = tl.load(shapes_ptr + 2 * lvl + 1).to(tl.int32)
        start = tl.load(starts_ptr + lvl).to(tl.int64)
        for pt in tl.static_range(P):
            idx = row * (L * P) + (lvl * P + pt)
            lx = tl.load(loc_ptr + 2 * idx, mask=mask_q, other=0.0).to(ACC)
            ly = tl.load(loc_ptr + 2 * idx + 1, mask=mask_q, other=0.0).to(ACC)
            aw = tl.load(attw_ptr + idx, mask=mask_q, other=0.0).to(ACC)
            x = tl.minimum(tl.maximum(lx * wl - 0.5, -2.0), wl + 1.0)
            y = tl.minimum(tl.maximum(ly * hl - 0.5, -2.0), hl + 1.0)
            x0f = tl.floor(x)
            y0f = tl.floor(y)
            fx = x - x0f
            fy = y - y0f
            x0 = x0f.to(tl.int32)
            y0 = y0f.to(tl.int32)
            # d[corner] = <grad_out, value at corner> over channels
            grad_w = tl.zeros((BLOCK_Q,), dtype=ACC)
            grad_fx = tl.zeros((BLOCK_Q,), dtype=ACC)  # d(sample . g) / d x_pixel
            grad_fy = tl.zeros((BLOCK_Q,), dtype=ACC)
            for corner in tl.static_range(4):
                dx = corner % 2
                dy = corner // 2
                xx = x0 + dx
                yy = y0 + dy
                cwx = fx if dx == 1 else 1.0 - fx
                cwy = fy if dy == 1 else 1.0 - fy
                sx = 1.0 if dx == 1 else -1.0  # d cwx / d x
                sy = 1.0 if dy == 1 else -1.0
                ok = mask_q & (xx >= 0) & (xx < wl) & (yy >= 0) & (yy < hl)
                okc = ok[:, None] & mask_c[None, :]
                pos = (b * S + start + (yy * wl + xx).to(tl.int64)) * NH + h
                offs = pos[:, None] * C + offs_c[None, :]
                v = tl.load(value_ptr + offs, mask=okc, other=0.0).to(ACC)
                d = tl.sum(v * g, axis=1)  # (BLOCK_Q,)
                grad_w += cwx * cwy * d
                grad_fx += sx * cwy * d
                grad_fy += cwx * sy * d
                contrib = (aw * cwx * cwy)[:, None] * g
                tl.atomic_add(gvalue_ptr + offs, contrib.to(gvalue_ptr.dtype.element_ty), mask=okc)
            gdt = gloc_ptr.dtype.element_ty
            tl.store(gloc_ptr + 2 * idx, (aw * wl * grad_fx).to(gdt), mask=mask_q)
            tl.store(gloc_ptr + 2 * idx + 1, (aw * hl * grad_fy).to(gdt), mask=mask_q)
            tl.store(gattw_ptr + idx, grad_w.to(gattw_ptr.dtype.element_ty), mask=mask_q)


_jitted: dict[bool, tuple[Any, Any]] = {}


def interpreting() -> bool:
    """True when Triton runs its CPU interpreter (``TRITON_INTERPRET=1``)."""
    knobs = getattr(triton, "knobs", None)
    runtime = getattr(knobs, "runtime", None)
    if runtime is not None and hasattr(runtime, "interpret"):
        return bool(runtime.interpret)
    from ...config import env_flag

    return env_flag("TRITON_INTERPRET")


def _kernels() -> tuple[Any, Any]:
    """The jitted (forward, backward) kernels for the current interpreter mode. They are wrapped
    on first use, not at import, so ``TRITON_INTERPRET`` is honoured whenever it was set."""
    mode = interpreting()
    if mode not in _jitted:
        _jitted[mode] = (triton.jit(_fwd), triton.jit(_bwd))
    return _jitted[mode]


def _acc(*tensors: Tensor) -> Any:
    return tl.float64 if any(t.dtype == torch.float64 for t in tensors) else tl.float32


def _launch_config(q: int, c: int) -> tuple[int, int, int]:
    block_c = triton.next_power_of_2(c)
    block_q = max(1, min(16, 4096 // block_c))
    warps = 4 if block_q * block_c >= 1024 else 2
    return block_q, block_c, warps


def _forward(value: Tensor, shapes: Tensor, starts: Tensor, loc: Tensor, attw: Tensor) -> Tensor:
    b, s, nh, c = value.shape
    _, q, _, nl, np_, _ = loc.shape
    out = torch.empty((b, q, nh, c), dtype=value.dtype, device=value.device)
    block_q, block_c, warps = _launch_config(q, c)
    fwd, _ = _kernels()
    grid = (triton.cdiv(q, block_q), nh, b)
    fwd[grid](
        value, shapes, starts, loc, attw, out, s, q,
        NH=nh, C=c, L=nl, P=np_, BLOCK_Q=block_q, BLOCK_C=block_c,
        ACC=_acc(value, loc, attw), num_warps=warps,
    )  # fmt: skip
    return out.view(b, q, nh * c)


def _backward(
    value: Tensor, shapes: Tensor, starts: Tensor, loc: Tensor, attw: Tensor, grad_out: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    b, s, nh, c = value.shape
    _, q, _, nl, np_, _ = loc.shape
    acc_dtype = torch.float64 if value.dtype == torch.float64 else torch.float32
    grad_value = torch.zeros(value.shape, dtype=acc_dtype, device=value.device)
    grad_loc = torch.empty_like(loc)
    grad_attw = torch.empty_like(attw)
    block_q, block_c, warps = _launch_config(q, c)
    _, bwd = _kernels()
    grid = (triton.cdiv(q, block_q), nh, b)
    bwd[grid](
        value, shapes, starts, loc, attw, grad_out.contiguous(), grad_value, grad_loc, grad_attw,
        s, q, NH=nh, C=c, L=nl, P=np_, BLOCK_Q=block_q, BLOCK_C=block_c,
        ACC=_acc(value, loc, attw), num_warps=warps,
    )  # fmt: skip
    return grad_value.to(value.dtype), grad_loc, grad_attw


class _MSDeformAttnTriton(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, value, spatial_shapes, level_start_index, sampling_locations, attention_weights
    ):  # type: ignore[override]
        value = value.contiguous()
        loc = sampling_locations.contiguous()
        attw = attention_weights.contiguous()
        shapes = spatial_shapes.contiguous()
        starts = level_start_index.contiguous()
        ctx.save_for_backward(value, shapes, starts, loc, attw)
        return _forward(value, shapes, starts, loc, attw)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        value, shapes, starts, loc, attw = ctx.saved_tensors
        gv, gl, gw = _backward(value, shapes, starts, loc, attw, grad_out)
        need = ctx.needs_input_grad
        return (
            gv if need[0] else None,
            None,
            None,
            gl if need[3] else None,
            gw if need[4] else None,
        )


def ms_deform_attn_triton(
    value: Tensor,
    spatial_shapes: Tensor,
    level_start_index: Tensor,
    sampling_locations: Tensor,
    attention_weights: Tensor,
) -> Tensor:
    """Triton multi-scale deformable attention with autograd (contract: module docstring)."""
    return _MSDeformAttnTriton.apply(
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights
    )


def cpu_interpreter_asked() -> bool:
    """CPU tensors may take an in-tree Triton provider (``"triton"``, this one or another slot's):
    the interpreter is on and the provider was asked for by name."""
    return interpreting() and registry.override() == NAME


def device_ok(t: Tensor) -> bool:
    """``t`` is on a device an in-tree Triton provider runs on: CUDA, or the CPU when :func:`cpu_interpreter_asked`."""
    if t.device.type == "cuda":
        return True
    return t.device.type == "cpu" and cpu_interpreter_asked()


def applies(
    value: Tensor | None = None,
    spatial_shapes: Tensor | None = None,
    level_start_index: Tensor | None = None,
    sampling_locations: Tensor | None = None,
    attention_weights: Tensor | None = None,
) -> bool:
    """Predicate of the ``"triton"`` implementation (see module docstring). Called with no
    arguments it answers whether the provider can run on this machine at all."""
    if not eager_only():
        return False
    if value is None:
        return torch.cuda.is_available() or cpu_interpreter_asked()
    tensors = (value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
    if any(not isinstance(t, Tensor) for t in tensors):
        return False
    if any(t.device != value.device for t in tensors) or not device_ok(value):
        return False
    if value.dim() != 4 or sampling_locations.dim() != 6 or attention_weights.dim() != 5:
        return False  # not the uniform-points layout
    if not sampling_locations.is_floating_point():
        return False  # discrete (integer-index) sampling
    if any(t.dtype not in DTYPES for t in (value, sampling_locations, attention_weights)):
        return False
    return spatial_shapes.dtype == torch.int64 and level_start_index.dtype == torch.int64


registry.register(OP, ms_deform_attn_triton, name=NAME, predicate=applies)

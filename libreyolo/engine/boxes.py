"""Per-image detection and classification fields of :class:`~libreyolo.engine.results.Results`.

:class:`Boxes` holds ``Tensor[N, 6]`` detections (x1, y1, x2, y2 in original-image pixels,
conf, cls) and, from a tracker, ``Tensor[N]`` int64 track ids; :class:`Probs` holds
``Tensor[nc]`` class probabilities. Both return tensors, or numpy arrays after ``.numpy()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError


class Boxes:
    """Detections of one image.

    Args:
        data (Tensor[N, 6] | np.ndarray[N, 6]): x1, y1, x2, y2, conf, cls; a single row (6,) is
            treated as N = 1. ``(N, 7)`` rows are x1, y1, x2, y2, track id, conf, cls (the
            tracking layout of Ultralytics): the id column is split off into :attr:`id`.
        orig_shape: (h, w) of the image the pixel coordinates refer to.
        id (Tensor[N] | np.ndarray[N] | None): track ids (int64) from a tracker, else ``None``.

    Properties return tensors, or numpy arrays after :meth:`numpy`. :attr:`data` is always the
    six columns above (the ids live in :attr:`id`, so code written for detection keeps working).

    Example:
        >>> b = Boxes(torch.tensor([[16.0, 32.0, 48.0, 64.0, 0.75, 2.0]]), orig_shape=(64, 128))
        >>> b.xyxy.tolist(), b.xywh.tolist(), b.conf.tolist(), b.cls.long().tolist()
        ([[16.0, 32.0, 48.0, 64.0]], [[32.0, 48.0, 32.0, 32.0]], [0.75], [2])
        >>> b.xyxyn.tolist(), b.xywhn.tolist()
        ([[0.125, 0.5, 0.375, 1.0]], [[0.25, 0.75, 0.25, 0.5]])
        >>> b.data.shape, b.shape, len(b), b.is_track, b.id
        (torch.Size([1, 6]), (1, 6), 1, False, None)
        >>> t = Boxes(torch.tensor([[0.0, 0.0, 4.0, 4.0, 7.0, 0.9, 1.0]]), (8, 8))  # (N, 7): with track ids
        >>> t.is_track, t.id.tolist(), t.data.shape
        (True, [7], torch.Size([1, 6]))
    """

    def __init__(self, data: Tensor | np.ndarray, orig_shape: tuple[int, int], *, as_numpy: bool = False,
                 id: Tensor | np.ndarray | None = None) -> None:
        if isinstance(data, np.ndarray):
            data = torch.from_numpy(data)
            as_numpy = True
        if not isinstance(data, Tensor):
            raise ConfigError(f"boxes must be a Tensor[N, 6] or an array, got {type(data).__name__}")
        if data.ndim == 1:
            data = data[None]
        if data.ndim == 2 and data.shape[1] == 7:
            if id is not None:
                raise ConfigError("boxes of shape (N, 7) already carry track ids in column 4; do not pass id= too")
            id, data = data[:, 4], torch.cat([data[:, :4], data[:, 5:]], dim=1)
        if data.ndim != 2 or data.shape[1] != 6:
            raise ConfigError(f"boxes must have shape (N, 6) = x1, y1, x2, y2, conf, cls (or (N, 7) with a "
                              f"track id in column 4); got {tuple(data.shape)}")
        if id is not None:
            id = torch.from_numpy(np.asarray(id)) if not isinstance(id, Tensor) else id
            if id.ndim != 1 or id.shape[0] != data.shape[0]:
                raise ConfigError(f"id must be a 1-D sequence of {data.shape[0]} track ids, got shape {tuple(id.shape)}")
            id = id.to(device=data.device, dtype=torch.int64)
        self._data = data
        self._id: Tensor | None = id
        self.orig_shape = (int(orig_shape[0]), int(orig_shape[1]))
        self._as_numpy = as_numpy

    def _out(self, t: Tensor) -> Any:
        return t.numpy() if self._as_numpy else t

    def _scale(self) -> Tensor:
        h, w = self.orig_shape
        return torch.tensor([w, h, w, h], dtype=self._data.dtype, device=self._data.device)

    @property
    def data(self) -> Any:
        """(N, 6): x1, y1, x2, y2, conf, cls."""
        return self._out(self._data)

    @property
    def xyxy(self) -> Any:
        """(N, 4) corners in pixels."""
        return self._out(self._data[:, :4])

    @property
    def conf(self) -> Any:
        """(N,) confidences."""
        return self._out(self._data[:, 4])

    @property
    def cls(self) -> Any:
        """(N,) class ids (float; use ``.long()`` / ``.astype(int)`` for indices)."""
        return self._out(self._data[:, 5])

    @property
    def xywh(self) -> Any:
        """(N, 4) centre x, centre y, width, height in pixels."""
        from ..ops.boxes import xyxy_to_xywh

        return self._out(xyxy_to_xywh(self._data[:, :4]))

    @property
    def xyxyn(self) -> Any:
        """(N, 4) corners divided by image width/height (0..1)."""
        return self._out(self._data[:, :4] / self._scale())

    @property
    def xywhn(self) -> Any:
        """(N, 4) centre and size divided by image width/height (0..1)."""
        from ..ops.boxes import xyxy_to_xywh

        return self._out(xyxy_to_xywh(self._data[:, :4]) / self._scale())

    @property
    def id(self) -> Any:
        """(N,) int64 track ids when the boxes come from a tracker (:attr:`is_track`), else ``None``."""
        return self._out(self._id) if self._id is not None else None

    @property
    def is_track(self) -> bool:
        """Whether these boxes carry track ids (``model.track``)."""
        return self._id is not None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    def __len__(self) -> int:
        return int(self._data.shape[0])

    def _new(self, data: Tensor, id: Tensor | None, *, as_numpy: bool) -> Boxes:
        return Boxes(data, self.orig_shape, as_numpy=as_numpy, id=id)

    def __getitem__(self, idx: Any) -> Boxes:
        if isinstance(idx, int) and not isinstance(idx, bool):
            n = len(self)
            if not -n <= idx < n:
                raise IndexError(f"box index {idx} out of range for {n} boxes")
            idx = idx % n
            idx = slice(idx, idx + 1)  # keep (1, 6): properties stay 2-D
        if isinstance(idx, np.ndarray):
            idx = torch.from_numpy(idx)
        data = self._data[idx]
        ids = self._id[idx] if self._id is not None else None
        return self._new(data, ids, as_numpy=self._as_numpy)

    def __iter__(self) -> Iterator[Boxes]:
        return (self[i] for i in range(len(self)))

    def cpu(self) -> Boxes:
        """The same boxes on the CPU.

        Example:
            >>> b = Boxes(torch.tensor([[16.0, 32.0, 48.0, 64.0, 0.75, 2.0]]), (64, 128))
            >>> b.cpu().xyxy.device
            device(type='cpu')
        """
        return self._new(self._data.cpu(), self._id.cpu() if self._id is not None else None,
                         as_numpy=self._as_numpy)

    def to(self, device: str | torch.device) -> Boxes:
        """The same boxes on ``device``.

        Example:
            >>> b = Boxes(torch.tensor([[16.0, 32.0, 48.0, 64.0, 0.75, 2.0]]), (64, 128))
            >>> b.to("cpu").conf.device.type
            'cpu'
        """
        return self._new(self._data.to(device), self._id.to(device) if self._id is not None else None,
                         as_numpy=self._as_numpy)

    def numpy(self) -> Boxes:
        """The same boxes, with every property returning numpy arrays.

        Example:
            >>> b = Boxes(torch.tensor([[16.0, 32.0, 48.0, 64.0, 0.75, 2.0]]), (64, 128))
            >>> b.numpy().xywhn
            array([[0.25, 0.75, 0.25, 0.5 ]], dtype=float32)
        """
        return self._new(self._data.detach().cpu(), self._id.cpu() if self._id is not None else None,
                         as_numpy=True)

    def tolist(self) -> list[list[float]]:
        """The rows ``[x1, y1, x2, y2, conf, cls]`` as Python lists.

        Example:
            >>> b = Boxes(torch.tensor([[16.0, 32.0, 48.0, 64.0, 0.75, 2.0]]), (64, 128))
            >>> b.tolist()
            [[16.0, 32.0, 48.0, 64.0, 0.75, 2.0]]
        """
        return self._data.tolist()

    def __repr__(self) -> str:
        ids = f", id={self._id.tolist()}" if self._id is not None else ""
        return f"Boxes(n={len(self)}, orig_shape={self.orig_shape}{ids}, data={self._data!r})"


class Probs:
    """Class probabilities of one image (classification).

    Args:
        data (Tensor[nc] | np.ndarray[nc]): probabilities (softmax output), float.

    ``top1`` (int), ``top5`` (list[int], best first, fewer when nc < 5), ``top1conf`` (Tensor
    scalar), ``top5conf`` (Tensor[k]); ``data`` as given (numpy after :meth:`numpy`).

    Example:
        >>> p = Probs(torch.tensor([0.125, 0.625, 0.25]))
        >>> p.top1, p.top5, p.top1conf.item(), p.top5conf.tolist()
        (1, [1, 2, 0], 0.625, [0.625, 0.25, 0.125])
        >>> p.data.tolist(), p.shape, len(p)
        ([0.125, 0.625, 0.25], (3,), 3)
    """

    def __init__(self, data: Tensor | np.ndarray, *, as_numpy: bool = False) -> None:
        if isinstance(data, np.ndarray):
            data = torch.from_numpy(data)
            as_numpy = True
        if not isinstance(data, Tensor) or data.ndim != 1 or data.numel() == 0:
            shape = tuple(getattr(data, "shape", ()))
            raise ConfigError(f"probs must be a 1-D Tensor[nc] of class probabilities, got "
                              f"{type(data).__name__} {shape}")
        self._data = data
        self._as_numpy = as_numpy

    def _out(self, t: Tensor) -> Any:
        return t.numpy() if self._as_numpy else t

    @property
    def data(self) -> Any:
        """(nc,) probabilities."""
        return self._out(self._data)

    @property
    def top1(self) -> int:
        """The most probable class id."""
        return int(self._data.argmax())

    @property
    def top5(self) -> list[int]:
        """The (up to) five most probable class ids, best first."""
        return self._data.topk(min(5, self._data.numel())).indices.tolist()

    @property
    def top1conf(self) -> Any:
        """Probability of :attr:`top1` (0-d)."""
        return self._out(self._data.max())

    @property
    def top5conf(self) -> Any:
        """Probabilities of :attr:`top5` (k,)."""
        return self._out(self._data.topk(min(5, self._data.numel())).values)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    def __len__(self) -> int:
        return int(self._data.numel())

    def cpu(self) -> Probs:
        """The same probabilities on the CPU.

        Example:
            >>> p = Probs(torch.tensor([0.125, 0.625, 0.25]))
            >>> p.cpu().data.device
            device(type='cpu')
        """
        return Probs(self._data.cpu(), as_numpy=self._as_numpy)

    def to(self, device: str | torch.device) -> Probs:
        """The same probabilities on ``device``.

        Example:
            >>> p = Probs(torch.tensor([0.125, 0.625, 0.25]))
            >>> p.to("cpu").top5conf.device.type
            'cpu'
        """
        return Probs(self._data.to(device), as_numpy=self._as_numpy)

    def numpy(self) -> Probs:
        """The same probabilities, with ``data``, ``top1conf`` and ``top5conf`` as numpy arrays.

        Example:
            >>> p = Probs(torch.tensor([0.125, 0.625, 0.25]))
            >>> p.numpy().top5conf
            array([0.625, 0.25 , 0.125], dtype=float32)
        """
        return Probs(self._data.detach().cpu(), as_numpy=True)

    def tolist(self) -> list[float]:
        """The probabilities as a Python list.

        Example:
            >>> p = Probs(torch.tensor([0.125, 0.625, 0.25]))
            >>> p.tolist()
            [0.125, 0.625, 0.25]
        """
        return self._data.tolist()

    def __repr__(self) -> str:
        return f"Probs(nc={len(self)}, top1={self.top1}, top1conf={float(self._data.max()):.4f})"

"""``libreyolo benchmark model=<exported model>``: latency of an export in its own runtime.

Two numbers per batch size, as medians after warm-up with a synchronised wall clock: the graph
alone (``network_ms``: one ``forward`` of a random batch through the runtime, including the copy
in and out) and, at batch 1, ``predict()`` end to end on the sample image (``predict_ms``:
source decode, letterbox, runtime, the postprocess that stays outside the graph, Results). The
PyTorch arms of :mod:`libreyolo.bench` (eager, CUDA graph, ``torch.compile``) do not apply to an
exported file.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError

logger = logging.getLogger(__name__)


def _batches(batch: int | str | Sequence[int]) -> list[int]:
    if isinstance(batch, str):
        items = [int(v) for v in batch.replace("[", "").replace("]", "").split(",") if v.strip()]
    elif isinstance(batch, int):
        items = [batch]
    else:
        items = [int(v) for v in batch]
    if not items or any(b < 1 for b in items):
        raise ConfigError(f"batch must be positive ints, got {batch!r}")
    return items


def _median_ms(fn: Any, *, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def benchmark_exported(*, model: str | Path, imgsz: int | str | Sequence[int] | None = None,
                       batch: int | str | Sequence[int] = 1, device: str | None = None, warmup: int = 5,
                       iters: int = 20, cuda_graph: Any = False, half: Any = None, out: str | Path | None = None,
                       show: bool = True) -> dict[str, Any]:
    """Time an exported model (ONNX, TorchScript, OpenVINO); returns (and with ``out`` writes as
    ``benchmark-<format>.json``) the numbers.

    Example:
        >>> benchmark_exported(model="LibreYOLO9t.onnx", batch="1,4", iters=10)  # doctest: +SKIP
    """
    from ..assets import SAMPLE_IMAGE
    from ..export.registry import format_of_path
    from ..model import LibreYOLO
    from ..ops.letterbox import check_imgsz

    fmt = format_of_path(model)
    if fmt is None:
        raise ConfigError(f"{str(model)!r} is not an exported model")
    if cuda_graph not in (False, None, "false", "False"):
        raise ConfigError("cuda_graph applies to PyTorch models; an exported model runs as exported")
    if half:
        raise ConfigError("half applies to PyTorch models; an export runs in the precision it was exported in")
    if warmup < 0 or iters < 1:
        raise ConfigError("warmup must be >= 0 and iters >= 1")
    loaded = LibreYOLO(str(model), device=device)
    if isinstance(imgsz, str):
        imgsz = [int(v) for v in imgsz.split(",")]
    size = imgsz if imgsz is not None else (list(loaded.fixed_hw) if loaded.fixed_hw else loaded.imgsz)
    h, w = check_imgsz(size if isinstance(size, int) else tuple(size), stride=loaded.stride)
    runs = []
    for b in _batches(batch):
        x = torch.rand(b, 3, h, w)
        ms = _median_ms(lambda x=x: loaded.forward(x), warmup=warmup, iters=iters)
        runs.append({"batch": b, "network_ms": ms, "network_ms_per_image": ms / b})
    kw = {"imgsz": (h, w), "rect": False} if h != w else {"imgsz": h, "rect": False}
    predict_ms = _median_ms(lambda: loaded.predict(SAMPLE_IMAGE, **kw), warmup=min(warmup, 3),
                            iters=max(iters // 2, 1))
    result = {"command": "benchmark", "model": str(model), "format": fmt.name, "runtime": fmt.runs,
              "head": loaded.head, "family": loaded.FAMILY, "size": loaded.size, "imgsz": [h, w],
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch": torch.__version__,
              "runs": runs, "predict_ms": predict_ms}
    if out is not None:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"benchmark-{fmt.name}.json").write_text(json.dumps(result, indent=2))
    if show:
        print(f"{Path(str(model)).name} ({fmt.runs}, head={loaded.head}, {h}x{w}):")
        for r in runs:
            print(f"  batch {r['batch']:>3}: network {r['network_ms']:.2f} ms "
                  f"({r['network_ms_per_image']:.2f} ms/image)")
        print(f"  predict() end to end, batch 1: {predict_ms:.2f} ms")
    return result

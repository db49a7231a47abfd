"""Per-epoch training logs: ``results.csv``, a ``results.png`` plot, optional TensorBoard events.

``results.png`` draws every column against the epoch with a smoothed line; the training and
validation losses of one name (``train/box_loss``, ``val/box_loss``) share a panel.

TensorBoard is optional: when ``torch.utils.tensorboard`` cannot be imported (the ``tensorboard``
package is absent) the logger says so once at INFO level and writes CSV and PNG only.

MLflow and Weights & Biases are opt-in (``mlflow=True``, ``wandb=True``) and used only when their
package is installed (a warning otherwise): the run's keys become parameters / config, each epoch's
row the metrics at step ``epoch``, and ``results.csv`` / ``results.png`` and the weights files are
attached at the end. Their own settings (``MLFLOW_TRACKING_URI``, ``WANDB_MODE``, ``WANDB_PROJECT``,
...) apply as usual.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


class ResultsLogger:
    """Append one row per epoch to ``save_dir/results.csv`` and redraw ``results.png``.

    Columns are fixed by the first row (``epoch`` first). On resume, rows of epochs at or after
    ``start_epoch`` are dropped so the file lists each epoch once.
    """

    def __init__(self, save_dir: Path, *, tensorboard: bool = True, plots: bool = True, start_epoch: int = 0,
                 mlflow: bool = False, wandb: bool = False, run_config: dict[str, Any] | None = None) -> None:
        self.save_dir = Path(save_dir)
        self.csv_path = self.save_dir / "results.csv"
        self.png_path = self.save_dir / "results.png"
        self.plots = plots
        self.rows: list[dict[str, float]] = []
        if start_epoch > 0 and self.csv_path.is_file():
            with open(self.csv_path, newline="") as f:
                self.rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)
                             if int(float(r["epoch"])) < start_epoch + 1]
            self._write_csv()
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                logger.info("tensorboard not installed: writing results.csv and results.png only")
            else:
                self._tb = SummaryWriter(str(self.save_dir))
        cfg = dict(run_config or {})
        self._sinks: list[Any] = [sink for want, make in ((mlflow, _MLflowSink), (wandb, _WandbSink))
                                  if want and (sink := make.open(self.save_dir, cfg)) is not None]

    def log(self, row: dict[str, float]) -> None:
        """Record one epoch (``row["epoch"]`` is 1-based)."""
        self.rows.append({k: float(v) for k, v in row.items()})
        self._write_csv()
        if self._tb is not None:
            step = int(row["epoch"])
            for k, v in row.items():
                if k != "epoch":
                    self._tb.add_scalar(k, float(v), step)
            self._tb.flush()
        if self.plots:
            self.plot()
        for sink in self._sinks:
            sink.log({k: float(v) for k, v in row.items() if k != "epoch"}, step=int(row["epoch"]))

    def _write_csv(self) -> None:
        if not self.rows:
            return
        keys = list(self.rows[0])
        tmp = self.csv_path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            for r in self.rows:
                w.writerow({k: (int(r[k]) if k == "epoch" else f"{r.get(k, float('nan')):.6g}") for k in keys})
        tmp.replace(self.csv_path)

    def plot(self) -> None:
        """One panel per quantity against epoch (matplotlib ``Figure``, Agg backend): the values as
        dots and, from three epochs on, a smoothed line (:func:`smooth`). ``train/<x>`` and
        ``val/<x>`` share one panel (``<x>``), train in blue, validation in orange."""
        from matplotlib.figure import (
            Figure,  # no pyplot: renders with Agg, no global backend change
        )

        panels = _panels([k for k in self.rows[0] if k != "epoch"])
        if not panels:
            return
        cols = min(5, len(panels))
        nrows = math.ceil(len(panels) / cols)
        fig = Figure(figsize=(3.2 * cols, 2.6 * nrows), tight_layout=True)
        x = np.array([r["epoch"] for r in self.rows])
        for i, (title, keys) in enumerate(panels):
            ax = fig.add_subplot(nrows, cols, i + 1)
            for k in keys:
                y = np.array([r.get(k, float("nan")) for r in self.rows], dtype=np.float64)
                colour = "tab:orange" if k.startswith("val/") else "tab:blue"
                label = k.split("/", 1)[0] if len(keys) > 1 else None
                ax.plot(x, y, marker=".", linewidth=1.0, color=colour, alpha=0.6, label=label)
                if np.isfinite(y).sum() >= 3:
                    ax.plot(x, smooth(y), ":", linewidth=2.0, color=colour)
            ax.set_title(title, fontsize=9)
            ax.grid(alpha=0.3)
            if len(keys) > 1:
                ax.legend(fontsize=7)
        fig.suptitle("dots: values per epoch; dotted: smoothed", fontsize=8)
        fig.savefig(self.png_path, dpi=100)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        files = [f for f in (self.csv_path, self.png_path, self.save_dir / "weights" / "best.pt",
                             self.save_dir / "weights" / "last.pt") if f.is_file()]
        for sink in self._sinks:
            sink.close(files)
        self._sinks = []


def _import_or_warn(name: str, key: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        logger.warning("%s=True but %s is not installed: not logging to it (pip install %s)", key, name, name)
        return None


def _params(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run keys as scalar parameters (None and containers as text)."""
    return {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in cfg.items()}


class _MLflowSink:
    """One MLflow run per training run (the active run is used when there is one)."""

    def __init__(self, mlflow: Any, own_run: bool) -> None:
        self.mlflow, self.own_run = mlflow, own_run

    @classmethod
    def open(cls, save_dir: Path, cfg: dict[str, Any]) -> _MLflowSink | None:
        mlflow = _import_or_warn("mlflow", "mlflow")
        if mlflow is None:
            return None
        own = mlflow.active_run() is None
        if own:
            mlflow.start_run(run_name=str(cfg.get("name") or save_dir.name))
        mlflow.log_params(_params(cfg))
        return cls(mlflow, own)

    def log(self, metrics: dict[str, float], *, step: int) -> None:
        self.mlflow.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)}, step=step)

    def close(self, files: list[Path]) -> None:
        for f in files:
            self.mlflow.log_artifact(str(f))
        if self.own_run:
            self.mlflow.end_run()


class _WandbSink:
    """One Weights & Biases run per training run (``WANDB_PROJECT`` or the run's ``project``)."""

    def __init__(self, wandb: Any, run: Any) -> None:
        self.wandb, self.run = wandb, run

    @classmethod
    def open(cls, save_dir: Path, cfg: dict[str, Any]) -> _WandbSink | None:
        wandb = _import_or_warn("wandb", "wandb")
        if wandb is None:
            return None
        import os

        project = os.environ.get("WANDB_PROJECT") or Path(str(cfg.get("project") or "libreyolo")).name
        run = wandb.init(project=project, name=str(cfg.get("name") or save_dir.name), config=_params(cfg),
                         dir=str(save_dir))
        return cls(wandb, run)

    def log(self, metrics: dict[str, float], *, step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self, files: list[Path]) -> None:
        for f in files:
            self.run.save(str(f), base_path=str(f.parent.parent if f.parent.name == "weights" else f.parent))
        self.run.finish()


def _panels(keys: list[str]) -> list[tuple[str, list[str]]]:
    """Columns -> (title, columns) panels: ``train/<x>`` and ``val/<x>`` together under ``<x>``."""
    out: list[tuple[str, list[str]]] = []
    where: dict[str, int] = {}
    for k in keys:
        head, _, tail = k.partition("/")
        if head in ("train", "val") and tail:
            if tail in where:
                out[where[tail]][1].append(k)
                continue
            where[tail] = len(out)
            out.append((tail, [k]))
        else:
            out.append((k, [k]))
    return out


def smooth(y: np.ndarray, fraction: float = 0.1) -> np.ndarray:
    """Centred moving average (ndarray[N] -> ndarray[N]) over an odd window of about ``fraction``
    of the points (at least 3), the ends padded by odd reflection; NaNs are interpolated over first."""
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(y)
    if ok.sum() < 2:
        return y.copy()
    idx = np.arange(len(y))
    y = np.interp(idx, idx[ok], y[ok])
    win = max(3, int(round(len(y) * fraction)) // 2 * 2 + 1)
    win = min(win, len(y) // 2 * 2 - 1) if len(y) < win else win
    if win < 3:
        return y
    half = win // 2
    padded = np.pad(y, half, mode="reflect", reflect_type="odd")  # keeps a linear trend at the ends
    return np.convolve(padded, np.ones(win) / win, mode="valid")

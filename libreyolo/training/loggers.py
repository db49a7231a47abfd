"""Per-epoch training logs: ``results.csv``, a ``results.png`` plot, optional TensorBoard events.

TensorBoard is optional: when ``torch.utils.tensorboard`` cannot be imported (the ``tensorboard``
package is absent) the logger says so once at INFO level and writes CSV and PNG only.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class ResultsLogger:
    """Append one row per epoch to ``save_dir/results.csv`` and redraw ``results.png``.

    Columns are fixed by the first row (``epoch`` first). On resume, rows of epochs at or after
    ``start_epoch`` are dropped so the file lists each epoch once.
    """

    def __init__(self, save_dir: Path, *, tensorboard: bool = True, plots: bool = True, start_epoch: int = 0) -> None:
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
        """One small panel per column against epoch (matplotlib, Agg backend)."""
        from matplotlib.figure import (
            Figure,  # no pyplot: renders with Agg, no global backend change
        )

        keys = [k for k in self.rows[0] if k != "epoch"]
        if not keys:
            return
        cols = min(5, len(keys))
        nrows = math.ceil(len(keys) / cols)
        fig = Figure(figsize=(3.2 * cols, 2.6 * nrows), tight_layout=True)
        x = [r["epoch"] for r in self.rows]
        for i, k in enumerate(keys):
            ax = fig.add_subplot(nrows, cols, i + 1)
            ax.plot(x, [r.get(k, float("nan")) for r in self.rows], marker=".", linewidth=1.5)
            ax.set_title(k, fontsize=9)
            ax.grid(alpha=0.3)
        fig.savefig(self.png_path, dpi=100)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None

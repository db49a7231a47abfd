"""``python -m libreyolo.cli ...`` runs the command line."""

from __future__ import annotations

from .main import entrypoint

if __name__ == "__main__":
    raise SystemExit(entrypoint())

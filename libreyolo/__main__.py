"""``python -m libreyolo ...`` runs the command line (same as the ``libreyolo`` script)."""

from __future__ import annotations

from .cli.main import entrypoint

if __name__ == "__main__":
    raise SystemExit(entrypoint())

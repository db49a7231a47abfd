"""Make ``libreyolo`` INFO lines (the per-class table of ``val()``) visible in a plain Python session.

Python's default logging shows only WARNING and above, so the table ``val()`` logs at INFO would
never appear outside the CLI. :func:`library_logging` installs, for the duration of one call, a
stderr handler on the ``libreyolo`` logger and lowers that logger to INFO, but only where nobody
configured logging: the ``libreyolo`` logger has no handler (the CLI installs one) and the root
logger has none (an application's ``logging.basicConfig`` wins). The root logger is never touched
and everything is restored on exit.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

LIBRARY_LOGGER = "libreyolo"


def _unconfigured(lg: logging.Logger) -> bool:
    return not lg.handlers and not logging.getLogger().handlers and lg.level in (logging.NOTSET, logging.INFO)


@contextlib.contextmanager
def library_logging(enabled: bool = True) -> Iterator[logging.Handler | None]:
    """Show ``libreyolo`` INFO messages on stderr inside the block when logging is unconfigured.

    Yields the handler it installed, or None when it left logging alone.

    Example:
        >>> with library_logging():
        ...     logging.getLogger("libreyolo.engine.validator").info("shown on stderr")  # doctest: +SKIP
    """
    lg = logging.getLogger(LIBRARY_LOGGER)
    if not enabled or not _unconfigured(lg):
        yield None
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    old_level = lg.level
    lg.addHandler(handler)
    lg.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        lg.removeHandler(handler)
        lg.setLevel(old_level)

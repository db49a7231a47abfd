"""What a ``Results`` without boxes shows, per kind of map: alpha matte, depth, restored image, semantic map or points.

:class:`~libreyolo.engine.results.Results` asks these functions first in ``verbose``, ``summary``
and ``plot``; each returns ``None`` when the result is a detection or classification one, which
the class then handles itself. The kinds are tried in one order (alpha, depth, restored, semantic,
points), so a result carrying several maps is described by the first. A new task with a map of
its own adds a line to each function (and its ``*_io`` module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    import numpy as np

    from .results import Results

ORDER = ("alpha", "depth", "restored", "semantic", "points", "texts")


def check_maps(orig_shape: tuple[int, int], **fields: Any) -> dict[str, Any]:
    """The map fields given (not ``None``) of a result for an image of ``orig_shape``, validated and
    converted by their kind's ``*_io`` module: ``alpha``, ``semantic``, ``depth``, ``points``, ``restored``,
    ``masks``, ``keypoints``. Raises the kind's one-line error for a bad value.

    Example:
        >>> import torch
        >>> out = check_maps((4, 6), semantic=torch.zeros(4, 6, dtype=torch.long), depth=None)
        >>> list(out), tuple(out["semantic"].shape)
        (['semantic'], (4, 6))
    """
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if value is None:
            continue
        if name == "semantic":
            from .semantic_io import check_semantic
            out[name] = check_semantic(value, orig_shape)
        elif name == "alpha":
            from .matte_io import check_alpha
            out[name] = check_alpha(value, orig_shape)
        elif name == "depth":
            from .depth_io import check_depth
            out[name] = check_depth(value, orig_shape)
        elif name == "points":
            from .points_io import check_points
            out[name] = check_points(value)
        elif name == "restored":
            from .restore_io import check_restored
            out[name] = check_restored(value, orig_shape)
        elif name == "masks":
            from .masks import Masks
            out[name] = value if isinstance(value, Masks) else Masks(value, orig_shape)
        elif name == "keypoints":
            from .keypoints import as_keypoints
            out[name] = as_keypoints(value, orig_shape)
        elif name == "texts":
            from .ocr_io import check_texts
            out[name] = check_texts(value)
        else:
            raise TypeError(f"unknown result field {name!r}")
    return out


def map_kind(r: Results) -> str | None:
    """The first map field set on a box-less result, or ``None``.

    Example:
        >>> import numpy as np, torch
        >>> from libreyolo.engine.results import Results
        >>> r = Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "a"}, semantic=torch.zeros(4, 6, dtype=torch.long))
        >>> map_kind(r), map_kind(Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "a"}))
        ('semantic', None)
    """
    if r.boxes is not None:
        return None
    return next((k for k in ORDER if getattr(r, k) is not None), None)


def kind_verbose(r: Results) -> str | None:
    """``Results.verbose`` for a map result (``None`` otherwise)."""
    kind = map_kind(r)
    if kind == "alpha":
        from .matte_io import alpha_verbose
        return alpha_verbose(r)
    if kind == "depth":
        from .depth_io import depth_verbose
        return depth_verbose(r)
    if kind == "restored":
        from .restore_io import restore_verbose
        return restore_verbose(r)
    if kind == "semantic":
        from .semantic_io import semantic_verbose
        return semantic_verbose(r)
    if kind == "points":
        from .points_io import points_verbose
        return points_verbose(r)
    if kind == "texts":
        from .ocr_io import texts_verbose
        return texts_verbose(r)
    return None


def kind_summary(r: Results, *, normalize: bool, decimals: int) -> list[dict[str, Any]] | None:
    """``Results.summary`` for a map result (``None`` otherwise)."""
    kind = map_kind(r)
    if kind == "alpha":
        from .matte_io import alpha_summary
        return alpha_summary(r, decimals=decimals)
    if kind == "depth":
        from .depth_io import depth_summary
        return depth_summary(r, decimals=decimals)
    if kind == "restored":
        from .restore_io import restore_summary
        return restore_summary(r, decimals=decimals)
    if kind == "semantic":
        from .semantic_io import semantic_summary
        return semantic_summary(r, decimals=decimals)
    if kind == "points":
        from .points_io import points_summary
        return points_summary(r, normalize=normalize, decimals=decimals)
    if kind == "texts":
        from .ocr_io import texts_summary
        return texts_summary(r, normalize=normalize, decimals=decimals)
    return None


def kind_plot(r: Results, *, labels: bool, conf: bool, line_width: int | None) -> np.ndarray | None:
    """``Results.plot`` for a map result (``None`` otherwise)."""
    kind = map_kind(r)
    if kind == "alpha":
        from .matte_io import plot_alpha
        return plot_alpha(r)
    if kind == "depth":
        from .depth_io import plot_depth
        return plot_depth(r)
    if kind == "restored":
        from .restore_io import plot_restored
        return plot_restored(r)
    if kind == "semantic":
        from .semantic_io import plot_semantic
        return plot_semantic(r)
    if kind == "points":
        from .points_io import plot_points
        return plot_points(r, labels=labels, conf=conf, line_width=line_width)
    if kind == "texts":
        from .ocr_io import plot_texts
        return plot_texts(r, labels=labels, conf=conf, line_width=line_width)
    return None

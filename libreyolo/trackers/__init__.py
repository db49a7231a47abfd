"""Multi-object trackers for ``model.track`` (ByteTrack).

- :class:`ByteTracker`: ``update(dets[N, 6]) -> (row index, track ids)`` per frame.
- :class:`ByteTrackConfig`: its thresholds; :func:`resolve_tracker` reads ``tracker=`` values.
- :func:`track`: the prediction loop with a tracker (what ``Model.track`` runs).

Example:
    >>> import numpy as np
    >>> t = ByteTracker()
    >>> t.update(np.array([[0, 0, 10, 10, 0.9, 0]]))[1].tolist()
    [1]
"""

from __future__ import annotations

from .byte_tracker import ByteTracker, Track, TrackState
from .config import ByteTrackConfig, resolve_tracker
from .track import track

__all__ = ["ByteTrackConfig", "ByteTracker", "Track", "TrackState", "resolve_tracker", "track"]

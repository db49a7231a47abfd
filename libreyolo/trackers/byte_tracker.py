"""ByteTrack: multi-object tracking by associating every detection box, low scores included
(Zhang et al., "ByteTrack: Multi-Object Tracking by Associating Every Detection Box", ECCV 2022).

Each frame (:meth:`ByteTracker.update`):

1. every live track (confirmed and lost) is moved one frame ahead by its Kalman filter;
2. the confident detections (score >= ``track_high_thresh``) are matched to those tracks on
   ``1 - IoU`` (score-weighted) with an optimal assignment; a lost track that matches is back;
3. the tracks still unmatched that were being followed are matched to the weak detections
   (between ``track_low_thresh`` and ``track_high_thresh``): an occluded or blurred object keeps
   its id through a frame where the detector is unsure; tracks left over become lost;
4. tracks started on the previous frame (seen once) are matched to the confident detections left;
   those that do not match are dropped (a one-frame false positive never gets an id);
5. confident detections left over (>= ``new_track_thresh``) start tracks (confirmed at once
   on the first frame, otherwise when seen again); lost tracks older than the buffer are removed.

Example:
    >>> t = ByteTracker()
    >>> for x in range(0, 50, 5):  # one box moving right, 5 px per frame
    ...     index, ids = t.update(np.array([[x, 10, x + 20, 30, 0.9, 0]], np.float32))
    >>> index.tolist(), ids.tolist()
    ([0], [1])
"""

from __future__ import annotations

import logging
from enum import Enum

import numpy as np

from .config import ByteTrackConfig
from .kalman import KalmanBoxFilter, xyah_to_xyxy, xyxy_to_xyah
from .matching import assign, box_iou, iou_cost

logger = logging.getLogger(__name__)


class TrackState(Enum):
    TRACKED = "tracked"
    LOST = "lost"
    REMOVED = "removed"


class Track:
    """One object followed over frames: its Kalman state, id, last score and class."""

    def __init__(self, xyxy: np.ndarray, score: float, cls: float, *, frame: int, track_id: int,
                 kf: KalmanBoxFilter, confirmed: bool) -> None:
        mean, cov = kf.initiate(xyxy_to_xyah(xyxy))
        self.mean, self.cov = mean[0], cov[0]
        self.score, self.cls = float(score), float(cls)
        self.id = track_id
        self.state = TrackState.TRACKED
        self.confirmed = confirmed
        self.start_frame = self.last_frame = frame
        self.hits = 1
        self.det_index = -1  # the detection row matched on the current frame, -1 when none

    @property
    def xyxy(self) -> np.ndarray:
        """(4,) the current state as corners."""
        return xyah_to_xyxy(self.mean[:4])[0]


class ByteTracker:
    """Tracks detections frame by frame with ByteTrack (see the module docstring).

    Args:
        config: thresholds and buffer (:class:`ByteTrackConfig`).
        frame_rate: frames per second of the source (scales how long a lost track is kept);
            ``config.frame_rate`` wins when set.

    Ids start at 1 and are never reused by one tracker.
    """

    def __init__(self, config: ByteTrackConfig | None = None, *, frame_rate: float = 30.0) -> None:
        self.config = config or ByteTrackConfig()
        rate = self.config.frame_rate or frame_rate or 30.0
        self.max_time_lost = max(1, int(round(rate / 30.0 * self.config.track_buffer)))
        self.kf = KalmanBoxFilter()
        self.frame = 0
        self.tracks: list[Track] = []  # tracked (confirmed or not) and lost; removed ones are dropped
        self._next_id = 1

    def reset(self) -> None:
        """Forget every track and restart ids at 1."""
        self.frame, self.tracks, self._next_id = 0, [], 1

    def _predict(self, tracks: list[Track]) -> None:
        if not tracks:
            return
        mean = np.stack([t.mean for t in tracks])
        for i, t in enumerate(tracks):
            if t.state is not TrackState.TRACKED:
                mean[i, 7] = 0.0  # a lost box keeps its size instead of growing or shrinking
        mean, cov = self.kf.predict(mean, np.stack([t.cov for t in tracks]))
        for i, t in enumerate(tracks):
            t.mean, t.cov = mean[i], cov[i]

    def _correct(self, pairs: list[tuple[Track, int]], dets: np.ndarray) -> None:
        if not pairs:
            return
        tracks = [t for t, _ in pairs]
        rows = np.array([j for _, j in pairs])
        mean, cov = self.kf.update(np.stack([t.mean for t in tracks]), np.stack([t.cov for t in tracks]),
                                   xyxy_to_xyah(dets[rows, :4]))
        for i, (t, j) in enumerate(pairs):
            t.mean, t.cov = mean[i], cov[i]
            t.score, t.cls = float(dets[j, 4]), float(dets[j, 5])
            t.state, t.last_frame, t.det_index = TrackState.TRACKED, self.frame, int(j)
            t.hits += 1

    def update(self, dets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Advance one frame with its detections.

        Args:
            dets (np.ndarray[N, 6] | Tensor[N, 6]): x1, y1, x2, y2, conf, cls of this frame.

        Returns:
            (index (np.ndarray[M], int64), ids (np.ndarray[M], int64)): the rows of ``dets`` that
            belong to a confirmed track this frame, in row order, and their track ids.
        """
        dets = np.asarray(dets.detach().cpu() if hasattr(dets, "detach") else dets, dtype=np.float64).reshape(-1, 6)
        cfg = self.config
        self.frame += 1
        for t in self.tracks:
            t.det_index = -1
        scores = dets[:, 4]
        high = np.flatnonzero(scores >= cfg.track_high_thresh)
        low = np.flatnonzero((scores >= cfg.track_low_thresh) & (scores < cfg.track_high_thresh))

        followed = [t for t in self.tracks if t.state is TrackState.TRACKED and t.confirmed]
        lost = [t for t in self.tracks if t.state is TrackState.LOST]
        fresh = [t for t in self.tracks if t.state is TrackState.TRACKED and not t.confirmed]
        pool = followed + lost
        self._predict(pool + fresh)

        # 1. confident detections against every live track
        fuse = scores[high] if cfg.fuse_score else None
        pairs, left_tracks, left_high = assign(iou_cost(_boxes(pool), dets[high, :4], fuse),
                                               max_cost=cfg.match_thresh)
        self._correct([(pool[i], int(high[j])) for i, j in pairs], dets)
        # 2. weak detections keep the followed tracks that are still unmatched alive
        waiting = [pool[i] for i in left_tracks if pool[i].state is TrackState.TRACKED]
        pairs2, unmatched2, _ = assign(iou_cost(_boxes(waiting), dets[low, :4]), max_cost=cfg.low_match_thresh)
        self._correct([(waiting[i], int(low[j])) for i, j in pairs2], dets)
        for i in unmatched2:
            waiting[i].state = TrackState.LOST
        # 3. tracks seen once, against the confident detections left
        rest = high[left_high]
        fuse = scores[rest] if cfg.fuse_score else None
        pairs3, unmatched3, left_rest = assign(iou_cost(_boxes(fresh), dets[rest, :4], fuse),
                                               max_cost=cfg.unconfirmed_match_thresh)
        self._correct([(fresh[i], int(rest[j])) for i, j in pairs3], dets)
        for i, _ in pairs3:
            fresh[i].confirmed = True
        for i in unmatched3:
            fresh[i].state = TrackState.REMOVED
        # 4. new tracks from confident detections nobody claimed
        for j in rest[left_rest]:
            if scores[j] >= cfg.new_track_thresh:
                t = Track(dets[j, :4], scores[j], dets[j, 5], frame=self.frame, track_id=self._next_id,
                          kf=self.kf, confirmed=self.frame == 1)
                t.det_index = int(j)
                self._next_id += 1
                self.tracks.append(t)
        # 5. forget tracks lost for too long, and lost duplicates of followed tracks
        for t in self.tracks:
            if t.state is TrackState.LOST and self.frame - t.last_frame > self.max_time_lost:
                t.state = TrackState.REMOVED
        self._drop_duplicates()
        self.tracks = [t for t in self.tracks if t.state is not TrackState.REMOVED]

        out = sorted((t.det_index, t.id) for t in self.tracks
                     if t.state is TrackState.TRACKED and t.confirmed and t.det_index >= 0)
        index = np.array([i for i, _ in out], dtype=np.int64)
        ids = np.array([k for _, k in out], dtype=np.int64)
        return index, ids

    def _drop_duplicates(self) -> None:
        """A lost track that sits on a followed one (IoU > 0.85) is the same object twice: the
        younger of the two goes."""
        followed = [t for t in self.tracks if t.state is TrackState.TRACKED]
        lost = [t for t in self.tracks if t.state is TrackState.LOST]
        if not followed or not lost:
            return
        iou = box_iou(_boxes(followed), _boxes(lost))
        for i, j in zip(*np.nonzero(iou > 0.85), strict=True):
            a, b = followed[i], lost[j]
            if a.state is TrackState.REMOVED or b.state is TrackState.REMOVED:
                continue
            if self.frame - a.start_frame >= self.frame - b.start_frame:
                b.state = TrackState.REMOVED
            else:
                a.state = TrackState.REMOVED


def _boxes(tracks: list[Track]) -> np.ndarray:
    return np.stack([t.xyxy for t in tracks]) if tracks else np.zeros((0, 4))

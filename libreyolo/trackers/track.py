"""``model.track``: the prediction loop with a tracker after postprocessing.

Each result's boxes are replaced by the boxes that belong to a confirmed track, with their ids
(:attr:`~libreyolo.engine.boxes.Boxes.id`); detections not (yet) on a track are left out, as in
ByteTrack. Saving, labels, crops and display happen after tracking, so saved frames and label
lines carry the ids.

Tracker state per model: with ``persist=True`` it is kept between calls (feed frames one at a
time: ``model.track(frame, persist=True)`` in a loop), otherwise every call starts afresh. A
new video file within one source restarts the tracker (ids from 1).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Iterator
from typing import Any

from ..engine.boxes import Boxes
from ..engine.results import Results
from ..errors import ConfigError
from .byte_tracker import ByteTracker
from .config import ByteTrackConfig, resolve_tracker

logger = logging.getLogger(__name__)


class _TrackState:
    """A model's tracker across calls (``persist=True``) and the video it belongs to."""

    def __init__(self, config: ByteTrackConfig, vid_stride: int) -> None:
        self.config, self.vid_stride = config, vid_stride
        self.tracker: ByteTracker | None = None
        self.video: str | None = None

    def tracker_for(self, r: Results) -> ByteTracker:
        from ..engine.video import source_fps

        new_video = r.frame is not None and r.path != self.video
        if self.tracker is None or new_video:
            if self.tracker is not None:
                logger.debug("new video %s: tracker restarted", r.path)
            fps = source_fps(r.path) / self.vid_stride if r.frame is not None else 30.0
            self.tracker = ByteTracker(self.config, frame_rate=fps)
            self.video = r.path if r.frame is not None else self.video
        return self.tracker


_STATES: weakref.WeakKeyDictionary[Any, _TrackState] = weakref.WeakKeyDictionary()


def track(model: Any, source: Any, opts: Any, *, tracker: Any = "bytetrack", persist: bool = False) -> Iterator[Results]:
    """Yield one tracked :class:`Results` per image / frame of ``source``.

    Args:
        model: a detection model (its task tracks: :attr:`libreyolo.tasks.base.Task.tracks`).
        source: anything ``predict`` takes; a video, webcam or stream, or frames in order.
        opts (PredictOptions): the prediction options (thresholds, outputs...).
        tracker: ``"bytetrack"``, a tracker YAML file or a :class:`ByteTrackConfig`.
        persist: keep the model's tracker from the previous call.
    """
    from ..engine.predictor import predict
    from ..engine.saving import ResultWriter
    from ..tasks import task_of

    task = task_of(model)
    if not task.tracks:
        raise ConfigError(f"track() needs a detection model; this one predicts {task.results_field!r} "
                          f"(task {task.name!r})")
    if not isinstance(persist, bool):
        raise ConfigError(f"persist must be True or False, got {persist!r}")
    config = resolve_tracker(tracker)
    state = _STATES.get(model) if persist else None
    if state is None or state.config != config or state.vid_stride != opts.vid_stride:
        state = _TrackState(config, opts.vid_stride)
        _STATES[model] = state
    writer = ResultWriter.from_options(opts, task=model.task, source=source)
    quiet = dataclasses.replace(opts, save=False, save_txt=False, save_crop=False, show=False)
    try:
        for r in predict(model, source, quiet):
            if r.boxes is not None:
                index, ids = state.tracker_for(r).update(r.boxes._data)
                r.update(boxes=Boxes(r.boxes._data[index], r.orig_shape, id=ids))
            writer(r)
            yield r
    finally:
        writer.close()

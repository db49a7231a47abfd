"""Tracker settings: :class:`ByteTrackConfig` and :func:`resolve_tracker`, which turns what a user
passes as ``tracker=`` (a name, a YAML file, a config object) into a config.

Example:
    >>> resolve_tracker("bytetrack").track_buffer
    30
    >>> resolve_tracker(ByteTrackConfig(match_thresh=0.9)).match_thresh
    0.9
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, check_keys

TRACKERS = ("bytetrack",)


@dataclass(frozen=True, kw_only=True)
class ByteTrackConfig:
    """ByteTrack thresholds (scores are detection confidences in [0, 1]).

    Attributes:
        track_high_thresh: detections at or above it take part in the first association.
        track_low_thresh: detections between it and ``track_high_thresh`` are used only to
            keep existing tracks alive (second association); below it they are dropped.
        new_track_thresh: an unmatched high detection at or above it starts a new track.
        track_buffer: frames (at 30 fps) a lost track is kept for re-identification.
        match_thresh: largest ``1 - IoU`` cost accepted in the first association.
        low_match_thresh: largest cost accepted in the second (low-score) association.
        unconfirmed_match_thresh: largest cost for a track seen once to be confirmed.
        fuse_score: weight the IoU by the detection score in the first and third association.
        frame_rate: frames per second of the source, scaling ``track_buffer``; ``None`` takes the
            video's own rate (30 for images and arrays).
    """

    track_high_thresh: float = 0.5
    track_low_thresh: float = 0.1
    new_track_thresh: float = 0.6
    track_buffer: int = 30
    match_thresh: float = 0.8
    low_match_thresh: float = 0.5
    unconfirmed_match_thresh: float = 0.7
    fuse_score: bool = True
    frame_rate: float | None = None

    def __post_init__(self) -> None:
        for key in ("track_high_thresh", "track_low_thresh", "new_track_thresh", "match_thresh",
                    "low_match_thresh", "unconfirmed_match_thresh"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
                raise ConfigError(f"tracker {key} must be a number in [0, 1], got {v!r}")
        if self.track_low_thresh > self.track_high_thresh:
            raise ConfigError(f"tracker track_low_thresh ({self.track_low_thresh}) must not exceed "
                              f"track_high_thresh ({self.track_high_thresh})")
        if isinstance(self.track_buffer, bool) or not isinstance(self.track_buffer, int) or self.track_buffer < 1:
            raise ConfigError(f"tracker track_buffer must be a positive int (frames), got {self.track_buffer!r}")
        if not isinstance(self.fuse_score, bool):
            raise ConfigError(f"tracker fuse_score must be True or False, got {self.fuse_score!r}")
        if self.frame_rate is not None and (isinstance(self.frame_rate, bool)
                                            or not isinstance(self.frame_rate, (int, float)) or self.frame_rate <= 0):
            raise ConfigError(f"tracker frame_rate must be a positive number or None, got {self.frame_rate!r}")


def resolve_tracker(tracker: Any) -> ByteTrackConfig:
    """``"bytetrack"`` / ``"bytetrack.yaml"`` (built-in defaults), a YAML file with
    ``tracker_type: bytetrack`` and any :class:`ByteTrackConfig` keys, or a config object."""
    if isinstance(tracker, ByteTrackConfig):
        return tracker
    if not isinstance(tracker, (str, Path)):
        raise ConfigError(f"tracker must be a name ({', '.join(TRACKERS)}), a YAML file or a ByteTrackConfig, "
                          f"got {type(tracker).__name__}")
    text = str(tracker)
    path = Path(text).expanduser()
    if path.is_file():
        return _from_yaml(path)
    name = text.lower().removesuffix(".yaml").removesuffix(".yml")
    if name in TRACKERS:
        return ByteTrackConfig()
    if name in ("botsort", "bot-sort", "bot_sort"):
        raise ConfigError("BoT-SORT is not implemented in libreyolo (no camera-motion compensation or "
                          "re-identification yet); use tracker='bytetrack'")
    raise ConfigError(f"unknown tracker {text!r}: pass one of {', '.join(TRACKERS)} or a YAML file path")


def _from_yaml(path: Path) -> ByteTrackConfig:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read tracker file '{path}': {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"tracker file '{path}' must be a mapping of keys, got {type(data).__name__}")
    kind = str(data.pop("tracker_type", "bytetrack")).lower()
    if kind not in TRACKERS:
        raise ConfigError(f"tracker file '{path}': tracker_type {kind!r} is not supported; use bytetrack")
    fields = [f.name for f in dataclasses.fields(ByteTrackConfig)]
    check_keys(list(data), fields, what=f"tracker ('{path.name}')")
    return ByteTrackConfig(**data)

"""ByteTrack (libreyolo.trackers): Kalman filter, assignment, id stability on synthetic moving
squares, the low-score association, lost-track recovery, configs, and model.track end to end."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np
import pytest
import torch
from torch import nn

from libreyolo.engine.plotting import class_color_bgr
from libreyolo.errors import ConfigError
from libreyolo.model import Model
from libreyolo.models._base.family import Family
from libreyolo.trackers import ByteTrackConfig, ByteTracker, resolve_tracker
from libreyolo.trackers.kalman import KalmanBoxFilter, xyah_to_xyxy, xyxy_to_xyah
from libreyolo.trackers.matching import assign, box_iou

H, W, SIDE = 120, 160, 16
# RGB colours of the squares (the background is black, letterbox padding grey)
COLOURS = ((230, 30, 30), (30, 230, 30), (30, 30, 230))


def _paths(t: int, *, crossing: bool = True) -> list[tuple[float, float]]:
    """Top-left corners at frame t: A moves right, B left (on a row crossing A's when
    ``crossing``, else far below it), C moves down."""
    b = (130 - 5 * t, 48 - 0.5 * t) if crossing else (130 - 5 * t, 96)
    return [(4 + 5 * t, 40 + 0.5 * t), b, (20, 2 + 3 * t)]


def _truth(t: int, *, crossing: bool = True, score: float = 0.9) -> np.ndarray:
    """The exact boxes of the squares at frame t (what a perfect detector says, occlusion or not): (3, 6)."""
    return np.array([[x, y, x + SIDE, y + SIDE, score, k] for k, (x, y) in enumerate(_paths(t, crossing=crossing))])


def _frame_rgb(t: int) -> np.ndarray:
    """The squares drawn (no crossing, so each stays fully visible)."""
    img = np.zeros((H, W, 3), np.uint8)
    for (x, y), c in zip(_paths(t, crossing=False), COLOURS, strict=True):
        x, y = int(round(x)), int(round(y))
        img[max(y, 0):y + SIDE, max(x, 0):x + SIDE] = c
    return img


def _detect(rgb: np.ndarray, score: float = 0.9) -> np.ndarray:
    """The squares' boxes found by colour in an image: (N, 6)."""
    rows = []
    for k, c in enumerate(COLOURS):
        mask = (np.abs(rgb.astype(int) - np.array(c)) < 40).all(axis=2)
        ys, xs = np.nonzero(mask)
        if len(xs):
            rows.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1, score, k])
    return np.array(rows, np.float64).reshape(-1, 6)


def _ids_by_class(tracker: ByteTracker, dets: np.ndarray) -> dict[int, int]:
    index, ids = tracker.update(dets)
    return {int(dets[i, 5]): int(k) for i, k in zip(index, ids, strict=True)}


# ------------------------------------------------------------------ building blocks
def test_kalman_filter_learns_constant_velocity_and_round_trips_boxes() -> None:
    kf = KalmanBoxFilter()
    box = np.array([[10.0, 20.0, 30.0, 60.0]])
    np.testing.assert_allclose(xyah_to_xyxy(xyxy_to_xyah(box)), box)
    mean, cov = kf.initiate(xyxy_to_xyah(box))
    for step in range(1, 12):
        mean, cov = kf.predict(mean, cov)
        mean, cov = kf.update(mean, cov, xyxy_to_xyah(box + [3.0 * step, 0, 3.0 * step, 0]))
    ahead, _ = kf.predict(mean, cov)
    assert ahead[0, 4] == pytest.approx(3.0, abs=0.3)  # x velocity, px / frame
    np.testing.assert_allclose(xyah_to_xyxy(ahead[:, :4])[0], box[0] + [36, 0, 36, 0], atol=1.0)
    assert np.all(np.linalg.eigvalsh(cov[0]) > 0)  # the covariance stays positive definite


def test_assignment_is_optimal_and_gated() -> None:
    cost = np.array([[0.1, 0.2], [0.15, 0.9]])
    assert assign(cost, max_cost=0.5) == ([(0, 1), (1, 0)], [], [])  # total 0.35 beats greedy 0.1 + 0.9
    assert assign(cost, max_cost=0.12) == ([(0, 0)], [1], [1])
    assert assign(np.zeros((0, 3)), max_cost=0.5) == ([], [], [0, 1, 2])
    iou = box_iou(np.array([[0, 0, 10, 10]]), np.array([[5, 0, 15, 10], [20, 20, 30, 30]]))
    np.testing.assert_allclose(iou, [[1 / 3, 0.0]])


# ------------------------------------------------------------------ id stability
def test_ids_stay_with_their_squares_on_a_synthetic_video_with_a_crossing() -> None:
    tracker = ByteTracker()
    seen: dict[int, set[int]] = {0: set(), 1: set(), 2: set()}
    crossed = False
    for t in range(26):
        dets = _truth(t)
        a, b = dets[dets[:, 5] == 0, :4], dets[dets[:, 5] == 1, :4]
        crossed |= bool(len(a) and len(b) and box_iou(a, b)[0, 0] > 0.3)  # A and B overlap
        by_cls = _ids_by_class(tracker, dets)
        assert set(by_cls) == {int(c) for c in dets[:, 5]}, t  # every square is tracked on every frame
        for c, k in by_cls.items():
            seen[c].add(k)
    assert crossed, "the synthetic paths must overlap for this test to mean something"
    assert [seen[c] for c in (0, 1, 2)] == [{1}, {2}, {3}]  # one id per square, never swapped


def test_a_weak_detection_keeps_the_track_through_the_second_association() -> None:
    def run(config: ByteTrackConfig) -> list[list[int]]:
        tracker, out = ByteTracker(config), []
        for t in range(12):
            dets = _truth(t)[:1]  # square A only
            if 5 <= t < 8:
                dets[:, 4] = 0.3  # blurred: the detector is unsure for three frames
            out.append(tracker.update(dets)[1].tolist())
        return out

    byte = run(ByteTrackConfig())
    assert byte == [[1]] * 12  # followed through the weak frames, same id
    no_low = run(ByteTrackConfig(track_low_thresh=0.5))  # weak boxes ignored: only confident matching
    assert no_low[5:8] == [[], [], []] and no_low[8] == [1]  # lost meanwhile, recovered after


def test_lost_tracks_are_recovered_within_the_buffer_and_forgotten_after() -> None:
    def gap_run(gap: int) -> list[int]:
        tracker = ByteTracker(ByteTrackConfig(track_buffer=5), frame_rate=30)
        ids: list[int] = []
        for t in range(20):
            dets = _truth(t)[:1]
            if 4 <= t < 4 + gap:
                dets = dets[:0]  # fully occluded
            ids += tracker.update(dets)[1].tolist()
        return ids

    assert set(gap_run(3)) == {1}  # back after 3 frames: same id
    late = gap_run(8)  # beyond the 5-frame buffer: a new track
    assert late[0] == 1 and late[-1] == 2


def test_one_frame_false_positives_never_get_an_id_and_ids_are_not_reused() -> None:
    tracker = ByteTracker()
    ghost = np.array([[100.0, 100.0, 120.0, 118.0, 0.95, 0.0]])
    assert tracker.update(_truth(0)[:1])[1].tolist() == [1]  # frame 1: confirmed at once
    dets = np.vstack([_truth(1)[:1], ghost])
    assert tracker.update(dets)[1].tolist() == [1]  # the ghost starts a track but is not confirmed
    assert tracker.update(_truth(2)[:1])[1].tolist() == [1]  # ghost gone: dropped
    newcomer = np.array([[100.0, 10.0, 120.0, 28.0, 0.9, 2.0]])
    for t in (3, 4):
        index, ids = tracker.update(np.vstack([_truth(t)[:1], newcomer]))
    assert ids.tolist() == [1, 3] and index.tolist() == [0, 1]  # confirmed on its 2nd frame; id 2 not reused


# ------------------------------------------------------------------ configs
def test_tracker_configs_from_names_files_and_objects(tmp_path: Path) -> None:
    assert resolve_tracker("bytetrack") == resolve_tracker("bytetrack.yaml") == ByteTrackConfig()
    yml = tmp_path / "mine.yaml"
    yml.write_text("tracker_type: bytetrack\ntrack_buffer: 60\nmatch_thresh: 0.9\n")
    assert resolve_tracker(str(yml)) == ByteTrackConfig(track_buffer=60, match_thresh=0.9)
    yml.write_text("tracker_type: bytetrack\ntrack_bufer: 60\n")
    with pytest.raises(ConfigError, match="Did you mean 'track_buffer'"):
        resolve_tracker(yml)
    with pytest.raises(ConfigError, match="BoT-SORT is not implemented"):
        resolve_tracker("botsort.yaml")
    with pytest.raises(ConfigError, match="unknown tracker 'deepsort'"):
        resolve_tracker("deepsort")
    with pytest.raises(ConfigError, match="must not exceed"):
        ByteTrackConfig(track_low_thresh=0.7, track_high_thresh=0.5)
    with pytest.raises(ConfigError, match="track_buffer"):
        ByteTrackConfig(track_buffer=0)


# ------------------------------------------------------------------ end to end through model.track
class _PassThrough(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class SquaresFamily(Family):
    """A stand-in detector: it finds the coloured squares in the (letterboxed) tensor it is fed."""

    FAMILY: ClassVar[str] = "squares_probe"
    NAME_TOKEN: ClassVar[str] = "SQUARES"
    SIZES: ClassVar[tuple[str, ...]] = ("n",)
    DEFAULT_IMGSZ: ClassVar[int] = 160

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        return _PassThrough()

    def postprocess(self, raw: Any, **kw: Any) -> list[torch.Tensor]:
        out = []
        for x in raw:  # (3, h, w) RGB in [0, 1]
            rgb = (x.permute(1, 2, 0).float().numpy() * 255).round().astype(np.uint8)
            out.append(torch.from_numpy(_detect(rgb)).float())
        return out


def _video(path: Path, frames: int = 20) -> Path:
    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (W, H))
    assert w.isOpened()
    for t in range(frames):
        w.write(np.ascontiguousarray(_frame_rgb(t)[:, :, ::-1]))
    w.release()
    return path


def test_model_track_gives_stable_ids_on_a_video_and_saves_them(tmp_path: Path) -> None:
    model = Model(SquaresFamily(size="n", nc=3, names=["a", "b", "c"]))
    vid = _video(tmp_path / "squares.avi")
    results = model.track(str(vid), save=True, save_txt=True, save_dir=str(tmp_path / "out"))
    assert len(results) == 20 and all(r.boxes.is_track for r in results)
    per_class: dict[int, set[int]] = {}
    for r in results:
        assert len(r.boxes) == 3
        for c, k in zip(r.boxes.cls.long().tolist(), r.boxes.id.tolist(), strict=True):
            per_class.setdefault(c, set()).add(k)
    assert per_class == {0: {1}, 1: {2}, 2: {3}}
    assert results[-1].summary()[0]["track_id"] == 1
    assert (tmp_path / "out" / "squares.mp4").is_file() and results[0].save_path == tmp_path / "out" / "squares.mp4"
    label = (tmp_path / "out" / "labels" / "squares_000019.txt").read_text().splitlines()
    assert [line.split()[-1] for line in label] == ["1", "2", "3"]  # ids at the end of the label lines
    drawn = results[5].plot(labels=False, line_width=3)
    x1, y1 = (int(round(v)) for v in results[5].boxes.xyxy[0, :2].tolist())
    np.testing.assert_array_equal(drawn[y1 + 8, x1], class_color_bgr(1))  # the outline in track 1's colour


def test_persist_keeps_tracks_across_calls_and_a_fresh_call_restarts() -> None:
    model = Model(SquaresFamily(size="n", nc=3, names=["a", "b", "c"]))

    def frame(t: int, *, without_a: bool = False) -> np.ndarray:
        rgb = _frame_rgb(t)
        if without_a:
            x, y = (int(round(v)) for v in _paths(t, crossing=False)[0])
            rgb[max(y, 0):y + SIDE, max(x, 0):x + SIDE] = 0
        return np.ascontiguousarray(rgb[:, :, ::-1])  # BGR, as cv2 reads frames

    for t in range(4):
        (r,) = model.track(frame(t), persist=True)
        assert r.boxes.id.tolist() == [1, 2, 3]
    (kept,) = model.track(frame(4, without_a=True), persist=True)
    assert kept.boxes.cls.tolist() == [1.0, 2.0] and kept.boxes.id.tolist() == [2, 3]  # the same tracks
    (fresh,) = model.track(frame(4, without_a=True))  # persist=False: a new tracker, ids from 1
    assert fresh.boxes.id.tolist() == [1, 2]
    (after,) = model.track(frame(5, without_a=True), persist=True)  # continues the newest tracker
    assert after.boxes.id.tolist() == [1, 2]


def test_track_takes_every_predict_keyword_and_checks_its_own() -> None:
    predict_kw = set(inspect.signature(Model.predict).parameters) - {"self"}
    track_kw = set(inspect.signature(Model.track).parameters) - {"self"}
    assert predict_kw <= track_kw and {"persist", "tracker"} <= track_kw
    model = Model(SquaresFamily(size="n", nc=3, names=["a", "b", "c"]))
    with pytest.raises(ConfigError, match="Did you mean 'persist'"):
        model.track(_frame_rgb(0), persists=True)
    with pytest.raises(ConfigError, match="persist must be True or False"):
        model.track(_frame_rgb(0), persist="yes")

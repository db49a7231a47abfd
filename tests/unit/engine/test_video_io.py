"""Sources and outputs (issue 20 item 2): .txt lists, webcams and streams (a fake capture and a
loopback HTTP server), vid_stride, videos saved as video files, save_txt / save_crop /
line_width / show."""

from __future__ import annotations

import functools
import http.server
import logging
import sys
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest
from test_colour_convention import ChannelFamily  # the stand-in family next to this file

from libreyolo.engine import saving, video
from libreyolo.engine.saving import OutputNamer, input_files
from libreyolo.engine.sources import load_source
from libreyolo.engine.video import VideoSink
from libreyolo.errors import ConfigError, SourceError
from libreyolo.model import Model


def _probe() -> ChannelFamily:
    return Model(ChannelFamily(size="n", nc=2, names=["red", "blue"]))


def _items(source, **kw):
    return [it for chunk in load_source(source, batch=kw.pop("batch", 1), **kw) for it in chunk]


def _png(path: Path, value: int = 60) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    img = np.full((64, 64, 3), value, np.uint8)
    img[..., 2] = 200  # red in BGR: the probe answers "red"
    assert cv2.imwrite(str(path), img)
    return path


def _video(path: Path, n: int, fps: float = 10.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (64, 48))
    assert w.isOpened()
    for i in range(n):
        w.write(np.full((48, 64, 3), 20 * i, np.uint8))
    w.release()
    return path


def _count_frames(path: Path) -> int:
    cap = cv2.VideoCapture(str(path))
    n = 0
    while cap.read()[0]:
        n += 1
    cap.release()
    return n


class FakeCapture:
    """Stands in for cv2.VideoCapture: ``n`` frames whose pixel value is the frame index."""

    def __init__(self, n: int, *, opened: bool = True, fps: float = 25.0) -> None:
        self.n, self.opened, self.fps, self.pos = n, opened, fps, 0
        self.decoded: list[int] = []
        self.released = False

    def isOpened(self) -> bool:  # noqa: N802 - the OpenCV name
        return self.opened

    def read(self):
        if self.pos >= self.n:
            return False, None
        self.decoded.append(self.pos)
        frame = np.full((8, 10, 3), self.pos, np.uint8)
        frame[..., 2] = 250  # BGR red channel
        self.pos += 1
        return True, frame

    def grab(self) -> bool:
        if self.pos >= self.n:
            return False
        self.pos += 1
        return True

    def get(self, prop: int) -> float:
        return self.fps if prop == cv2.CAP_PROP_FPS else 0.0

    def release(self) -> None:
        self.released = True


@pytest.fixture
def fake_cam(monkeypatch):
    opened: dict[object, FakeCapture] = {}

    def open_capture(target):
        cap = FakeCapture(7, opened=target in (0, 1))
        opened[target] = cap
        return cap

    monkeypatch.setattr(video, "open_capture", open_capture)
    return opened


# ------------------------------------------------------------------ .txt lists
def test_txt_list_file_resolves_entries_beside_it_in_order(tmp_path: Path) -> None:
    a, b = _png(tmp_path / "imgs" / "a.png", 10), _png(tmp_path / "imgs" / "b.png", 90)
    vid = _video(tmp_path / "v" / "clip.mp4", 3)
    lst = tmp_path / "list.txt"
    lst.write_text(f"# my images\nimgs/b.png\n\n{a}  # absolute, with a comment\nv/clip.mp4\n")
    items = _items(str(lst))
    assert [Path(it.path).name for it in items] == ["b.png", "a.png", "clip.mp4", "clip.mp4", "clip.mp4"]
    assert [it.frame for it in items] == [None, None, 0, 1, 2]
    assert items[0].orig[0, 0, 0] == 90 and items[1].orig[0, 0, 0] == 10
    # the listed files are inputs, so saving into their folder is refused like for a folder source
    assert {p.name for p in input_files(str(lst))} >= {"a.png", "b.png", "clip.mp4"}
    with pytest.raises(ConfigError, match="folder of the source image"):
        OutputNamer(tmp_path / "imgs", str(lst))
    assert b.exists() and vid.exists()


def test_txt_list_errors_name_the_entry(tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text("missing.jpg\n")
    with pytest.raises(SourceError, match=r"entry 1 \('.*missing.jpg'\).*does not exist"):
        load_source(str(lst), batch=1)
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    with pytest.raises(SourceError, match="names no sources"):
        load_source(str(tmp_path / "empty.txt"), batch=1)
    (tmp_path / "outer.txt").write_text("list.txt\n")
    with pytest.raises(SourceError, match="names another list file"):
        load_source(str(tmp_path / "outer.txt"), batch=1)


# ------------------------------------------------------------------ webcams and streams
@pytest.mark.parametrize("source", [0, "0"])
def test_webcam_index_reads_frames_through_the_capture(fake_cam, source) -> None:
    items = _items(source)
    assert [it.frame for it in items] == list(range(7))
    assert {it.path for it in items} == {"webcam0"}
    assert items[3].orig[0, 0].tolist() == [3, 3, 250] and items[3].image[0, 0].tolist() == [250, 3, 3]
    assert fake_cam[0].released


def test_vid_stride_skips_frames_without_decoding_them(fake_cam) -> None:
    items = _items(0, vid_stride=3)
    assert [it.frame for it in items] == [0, 3, 6]
    assert fake_cam[0].decoded == [0, 3, 6]  # the others were grab()bed only
    assert [it.orig[0, 0, 0] for it in items] == [0, 3, 6]


def test_a_webcam_that_does_not_open_fails_at_load_time(fake_cam) -> None:
    with pytest.raises(SourceError, match="cannot open webcam 5"):
        load_source(5, batch=1)
    assert fake_cam[5].released
    with pytest.raises(SourceError, match="webcam index must be >= 0"):
        load_source(-1, batch=1)


def test_vid_stride_is_validated(tmp_path: Path) -> None:
    for bad in (0, -2, 1.5, True):
        with pytest.raises(SourceError, match="vid_stride"):
            load_source(str(_png(tmp_path / "a.png")), batch=1, vid_stride=bad)
        with pytest.raises(ConfigError, match="vid_stride"):
            _probe().predict(str(tmp_path / "a.png"), vid_stride=bad)


def test_video_file_vid_stride(tmp_path: Path) -> None:
    vid = _video(tmp_path / "clip.mp4", 7)
    assert [it.frame for it in _items(str(vid), vid_stride=2)] == [0, 2, 4, 6]


def test_image_urls_are_refused_and_stream_schemes_listed() -> None:
    with pytest.raises(SourceError, match="image URLs are not downloaded"):
        load_source("https://example.com/a.jpg", batch=1)
    with pytest.raises(SourceError, match="not a video stream"):
        load_source("ftp://example.com/clip.mp4", batch=1)


@pytest.fixture
def loopback(tmp_path: Path):
    _video(tmp_path / "served" / "clip.mp4", 6)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                          functools.partial(Quiet, directory=str(tmp_path / "served")))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/clip.mp4"
    probe = cv2.VideoCapture(url)
    readable = probe.isOpened()
    probe.release()
    if not readable:
        srv.shutdown()
        pytest.skip("this OpenCV build cannot read http:// (no FFMPEG network support)")
    yield url
    srv.shutdown()


def test_stream_url_over_loopback_predicts_and_saves_a_video(loopback: str, tmp_path: Path) -> None:
    results = _probe().predict(loopback, save=True, save_dir=str(tmp_path / "out"), vid_stride=2)
    assert [r.frame for r in results] == [0, 2, 4] and results[0].path == loopback
    assert results[0].save_path == tmp_path / "out" / "clip.mp4"
    assert _count_frames(results[0].save_path) == 3


def test_a_stream_that_does_not_open_fails_at_load_time(monkeypatch) -> None:
    monkeypatch.setattr(video, "open_capture", lambda target: FakeCapture(0, opened=False))
    with pytest.raises(SourceError, match="cannot open stream 'rtsp://127.0.0.1:9/live'"):
        load_source("rtsp://127.0.0.1:9/live", batch=1)


# ------------------------------------------------------------------ outputs
def test_a_video_source_is_saved_as_one_video_per_input(tmp_path: Path) -> None:
    a, b = _video(tmp_path / "in" / "a.mp4", 5), _video(tmp_path / "in" / "b.mp4", 3)
    before = a.read_bytes()
    out = tmp_path / "out"
    results = _probe().predict([str(a), str(b)], save=True, save_dir=str(out))
    assert len(results) == 8
    assert sorted(p.name for p in out.iterdir()) == ["a.mp4", "b.mp4"]  # no per-frame JPEGs
    assert {r.save_path for r in results} == {out / "a.mp4", out / "b.mp4"}
    assert _count_frames(out / "a.mp4") == 5 and _count_frames(out / "b.mp4") == 3
    cap = cv2.VideoCapture(str(out / "a.mp4"))
    assert cap.get(cv2.CAP_PROP_FPS) == pytest.approx(10.0)  # the source's frame rate
    assert (cap.get(cv2.CAP_PROP_FRAME_WIDTH), cap.get(cv2.CAP_PROP_FRAME_HEIGHT)) == (64, 48)
    cap.release()
    assert a.read_bytes() == before


def test_webcam_frames_saved_as_a_video_with_stride_fps(fake_cam, tmp_path: Path) -> None:
    results = list(_probe().predict(0, save=True, save_dir=str(tmp_path), stream=True, vid_stride=2))
    assert [r.frame for r in results] == [0, 2, 4, 6]
    cap = cv2.VideoCapture(str(tmp_path / "webcam0.mp4"))
    assert cap.get(cv2.CAP_PROP_FPS) == pytest.approx(12.5)  # 25 fps read every 2nd frame
    cap.release()
    assert _count_frames(tmp_path / "webcam0.mp4") == 4


def test_video_sink_falls_back_to_avi_and_fails_clearly(tmp_path: Path, caplog) -> None:
    sink = VideoSink(tmp_path / "o.mp4", fps=5, codecs=(("XXXX", ".mp4"), ("MJPG", ".avi")))
    with caplog.at_level(logging.WARNING, logger="libreyolo.engine.video"):
        for i in range(4):
            sink.write(np.full((32, 48, 3), 30 * i, np.uint8))
        sink.write(np.zeros((10, 10, 3), np.uint8))  # another size: resized to the first
    assert sink.close() == tmp_path / "o.avi" and not (tmp_path / "o.mp4").exists()
    assert "wrote o.avi with MJPG" in caplog.text
    assert _count_frames(tmp_path / "o.avi") == 5
    bad = VideoSink(tmp_path / "p.mp4", codecs=(("XXXX", ".mp4"),))
    with pytest.raises(ConfigError, match="could not open a video writer"):
        bad.write(np.zeros((8, 8, 3), np.uint8))


def test_save_txt_conf_and_crop_from_predict(tmp_path: Path) -> None:
    img = _png(tmp_path / "in" / "pic.png")
    out = tmp_path / "out"
    (r,) = _probe().predict(str(img), save_txt=True, save_conf=True, save_crop=True, save_dir=str(out))
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "crops/red/pic.jpg", "labels/pic.txt"]  # save=False: no annotated image
    assert (out / "labels" / "pic.txt").read_text() == "0 0.5 0.5 0.875 0.875 0.9\n"
    assert cv2.imread(str(out / "crops" / "red" / "pic.jpg")).shape == (56, 56, 3)
    (r,) = _probe().predict(str(img), save_txt=True, save_dir=str(tmp_path / "o2"))
    assert (tmp_path / "o2" / "labels" / "pic.txt").read_text() == "0 0.5 0.5 0.875 0.875\n"


def test_line_width_reaches_the_saved_image(tmp_path: Path) -> None:
    img = _png(tmp_path / "in" / "pic.png")
    thin = _probe().predict(str(img), save=True, save_dir=str(tmp_path / "a"), line_width=1)[0].save_path
    thick = _probe().predict(str(img), save=True, save_dir=str(tmp_path / "b"), line_width=6)[0].save_path
    t, k = cv2.imread(str(thin)), cv2.imread(str(thick))
    orig = cv2.imread(str(img))
    assert (t[32, 7] == orig[32, 7]).all() and (k[32, 7] != orig[32, 7]).any()  # 3 px inside the left edge
    with pytest.raises(ConfigError, match="line_width"):
        _probe().predict(str(img), line_width=0)


def test_show_without_a_display_warns_once_and_with_one_shows_each_result(tmp_path: Path, monkeypatch,
                                                                          caplog) -> None:
    img = _png(tmp_path / "pic.png")
    monkeypatch.setattr(video, "display_available", lambda: False)
    monkeypatch.setattr(saving, "_SHOW_WARNED", [])
    with caplog.at_level(logging.WARNING, logger="libreyolo.engine.saving"):
        _probe().predict([str(img)] * 2, show=True)
        _probe().predict(str(img), show=True)
    assert caplog.text.count("no display is available") == 1
    shown = []
    monkeypatch.setattr(video, "display_available", lambda: True)
    monkeypatch.setattr(video, "show_frame", lambda window, frame: shown.append((window, frame)))
    results = _probe().predict([str(img), str(img)], show=True)
    assert [w for w, _ in shown] == [str(img)] * 2
    np.testing.assert_array_equal(shown[0][1], results[0].plot())
    with pytest.raises(ConfigError, match="show must be True or False"):
        _probe().predict(str(img), show="yes")


def test_display_available_is_false_without_a_display(monkeypatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert video.display_available() is False


def test_cli_predict_keys_match_the_api() -> None:
    import inspect

    from libreyolo.cli.commands import _predict_keys
    from libreyolo.model import Model

    keys = _predict_keys()
    params = inspect.signature(Model.predict).parameters
    for name in ("vid_stride", "save_txt", "save_conf", "save_crop", "line_width", "show"):
        assert name in keys and name in params
        assert keys[name].default == params[name].default

"""Output names of predict(save=True): never an input file, unique per run (libreyolo.engine.saving)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from libreyolo.engine.results import Results
from libreyolo.engine.saving import OutputNamer, _real, input_files
from libreyolo.errors import ConfigError
from libreyolo.model import Model


def _img(path: Path, value: int = 50) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full((8, 8, 3), value, np.uint8))
    return path


def _tree(tmp_path: Path) -> dict[str, Path]:
    return {"a": _img(tmp_path / "data" / "a" / "img.jpg", 10), "b": _img(tmp_path / "data" / "b" / "img.jpg", 20),
            "c": _img(tmp_path / "data" / "c.png", 30)}


@pytest.mark.parametrize("as_folder", [True, False])
def test_save_dir_equal_to_the_source_folder_is_refused(tmp_path: Path, as_folder: bool) -> None:
    img = _img(tmp_path / "pics" / "bus.jpg")
    source = str(tmp_path / "pics") if as_folder else str(img)
    with pytest.raises(ConfigError, match="is the folder of the source image 'bus.jpg'") as e:
        OutputNamer(tmp_path / "pics", source)
    assert "\n" not in str(e.value) and "save_dir=" in str(e.value)
    with pytest.raises(ConfigError, match="folder of the source"):  # spelled differently, same folder
        OutputNamer(tmp_path / "pics" / ".." / "pics", [str(tmp_path / "pics" / "*.jpg")])
    OutputNamer(tmp_path / "pics" / "predictions", source)  # a sub-folder is fine


def test_save_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    img = _img(tmp_path / "bus.jpg")
    with pytest.raises(ConfigError, match="is an existing file"):
        OutputNamer(img, str(img))


def test_same_basename_from_two_folders_gets_two_files(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    out = tmp_path / "out"
    namer = OutputNamer(out, [str(t["a"]), str(t["b"]), str(t["c"])])
    names = [namer.path_for(str(t[k]), None) for k in "abc"]
    assert names == [out / "a" / "img.jpg", out / "b" / "img.jpg", out / "c.png"]  # stem kept, sub-path added


def test_the_same_file_twice_and_in_memory_images_get_counters(tmp_path: Path) -> None:
    img = _img(tmp_path / "in" / "x.jpg")
    out = tmp_path / "out"
    namer = OutputNamer(out, [str(img), str(img), np.zeros((4, 4, 3), np.uint8)])
    assert namer.path_for(str(img), None) == out / "x.jpg"
    assert namer.path_for(str(img), None) == out / "x_2.jpg"
    out.mkdir()
    (out / "image0.jpg").write_bytes(b"from an earlier run")
    assert namer.path_for(None, None) == out / "image1.jpg"  # an existing in-memory output is kept
    assert namer.path_for(None, None) == out / "image2.jpg"


def test_frames_and_formats(tmp_path: Path) -> None:
    out = tmp_path / "out"
    namer = OutputNamer(out, [])
    assert namer.path_for("/v/clip.mp4", 12) == out / "clip_000012.jpg"
    assert namer.path_for("/p/scan.gif", None) == out / "scan.jpg"  # a format save() cannot write
    assert namer.path_for("/p/photo.webp", None) == out / "photo.webp"
    assert namer.path_for("/p/photo.webp", None, ".png") == out / "photo.png"
    assert namer.path_for("/p/photo.webp", None, "png") == out / "photo_2.png"


def test_save_dir_above_clashing_source_folders_is_refused(tmp_path: Path) -> None:
    """data/a/img.jpg + data/b/img.jpg saved to data/ would mirror onto the inputs themselves."""
    t = _tree(tmp_path)
    with pytest.raises(ConfigError, match="would put a result on top of the source image"):
        OutputNamer(tmp_path / "data", [str(t["a"]), str(t["b"])])


def test_never_returns_an_input_file_even_inside_save_dir(tmp_path: Path) -> None:
    """Inputs under save_dir (a recursive glob): outputs step around every one of them."""
    out = tmp_path / "out"
    inner = _img(out / "sub" / "x.jpg", 77)
    namer = OutputNamer(out, [str(inner)])
    assert namer.path_for(str(inner), None) == out / "x.jpg"
    # a name the counter would reach is itself an input: skipped
    x2 = _img(out / "sub" / "x_2.jpg", 78)
    namer = OutputNamer(out, [str(inner), str(x2)])
    namer._input_set.add(_real(out / "x_2.jpg"))  # as if out/x_2.jpg were a source file too
    assert [namer.path_for(str(inner), None) for _ in range(2)] == [out / "x.jpg", out / "x_3.jpg"]


def test_predict_style_loop_writes_every_result_and_leaves_inputs_untouched(tmp_path: Path) -> None:
    """What the predictor does with it: Results.save(explicit file) per result."""
    t = _tree(tmp_path)
    before = {p: p.read_bytes() for p in t.values()}
    out = tmp_path / "out"
    namer = OutputNamer(out, str(tmp_path / "data" / "**" / "*.*"))
    assert sorted(p.name for p in namer.inputs) == ["c.png", "img.jpg", "img.jpg"]
    written = []
    for p in sorted(t.values()):
        r = Results(orig_img=cv2.imread(str(p)), path=str(p), names={0: "x"},
                    boxes=torch.tensor([[1.0, 1.0, 6.0, 6.0, 0.9, 0.0]]))
        written.append(r.save(namer.path_for(r.path, r.frame)))
    assert len(set(written)) == 3 and all(w.is_file() and w.is_relative_to(out) for w in written)
    assert {p: p.read_bytes() for p in t.values()} == before


def test_input_files_resolves_folders_globs_and_lists(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    assert input_files(str(tmp_path / "data")) == [t["c"]]  # folders are not recursive, like sources
    assert sorted(input_files(str(tmp_path / "data" / "*" / "*.jpg"))) == sorted([t["a"], t["b"]])
    assert input_files([t["a"], np.zeros((2, 2, 3), np.uint8), "https://x/y.jpg"]) == [t["a"]]


# ------------------------------------------------------------------ through predict()
def _probe():
    from test_colour_convention import ChannelFamily  # the tiny stand-in family next to this file

    return Model(ChannelFamily(size="n", nc=2, names=["red", "blue"]))


def test_predict_on_a_folder_with_a_corrupt_file_returns_the_rest(tmp_path: Path, caplog) -> None:
    for name in ("a.png", "c.png"):
        _img(tmp_path / name)
    (tmp_path / "b.jpg").write_bytes(b"\xff\xd8 truncated jpeg")
    with caplog.at_level("WARNING", logger="libreyolo.engine.sources"):
        results = _probe().predict(str(tmp_path))
    assert [Path(r.path).name for r in results] == ["a.png", "c.png"]
    assert [Path(r.skipped_source).name for r in caplog.records if hasattr(r, "skipped_source")] == ["b.jpg"]


def test_predict_refuses_to_save_into_the_source_folder(tmp_path: Path) -> None:
    img = _img(tmp_path / "pics" / "bus.jpg")
    before = img.read_bytes()
    with pytest.raises(ConfigError, match="is the folder of the source image"):
        _probe().predict(str(tmp_path / "pics"), save=True, save_dir=str(tmp_path / "pics"))
    assert img.read_bytes() == before and sorted(p.name for p in img.parent.iterdir()) == ["bus.jpg"]


def test_predict_saves_same_named_sources_to_two_files(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    out = tmp_path / "out"
    results = _probe().predict([str(t["a"]), str(t["b"])], save=True, save_dir=str(out))
    assert [r.save_path for r in results] == [out / "a" / "img.jpg", out / "b" / "img.jpg"]

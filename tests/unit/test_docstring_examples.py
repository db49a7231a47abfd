"""The ``Example:`` sections of the public API run, and every public method has one (issue 21).

Each docstring with examples in :data:`MODULES` is one case, named after it
(``libreyolo.model.Model.predict``), run by :mod:`doctest` in a temporary working directory with
``tempfile`` pointed there too, so nothing is written into the repository or left in /tmp. The
globals are the module's own plus the names the examples assume (:data:`PREAMBLE`, what
``Model``'s docstring says a user imports). A failing example fails its case with doctest's report;
:data:`REQUIRED` lists the methods, functions and classes that must have an example, and only the
docstrings in :data:`SKIP_ALLOWED` may mark a line ``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
import tempfile

import numpy as np
import pytest
import torch

from libreyolo.registry import get_family

MODULES = ("libreyolo.model", "libreyolo.convert.build", "libreyolo.engine.results", "libreyolo.engine.boxes",
           "libreyolo.tasks.detect.results", "libreyolo.training.config", "libreyolo.registry",
           "libreyolo.bench.run", "libreyolo.tasks.semantic.scoring", "libreyolo.tasks.semantic.metrics",
           "libreyolo.tasks.semantic.maps", "libreyolo.engine.semantic_io", "libreyolo.data.semantic",
           "libreyolo.data.shapes_sem", "libreyolo.data.materialise", "libreyolo.models._base.semantic", "libreyolo.models.segformer.nn",
           "libreyolo.models.segformer.convert", "libreyolo.models.pidnet.nn", "libreyolo.models.pidnet.loss",
           "libreyolo.models.pidnet.convert", "libreyolo.engine.results_maps", "libreyolo.engine.results_kinds", "libreyolo.engine.depth_io",
           "libreyolo.tasks.depth.maps", "libreyolo.tasks.depth.metrics", "libreyolo.tasks.depth.scoring",
           "libreyolo.data.depth", "libreyolo.data.shapes_depth", "libreyolo.models._base.depth",
           "libreyolo.models.depth_anything.nn", "libreyolo.models.depth_anything.convert", "libreyolo.models._vit.taps",
           "libreyolo.models.dinov2_seg.nn", "libreyolo.models.dinov2_seg.convert", "libreyolo.convert.dinov2_seg", "libreyolo.convert.torchsave",
           "libreyolo.models._dpt.neck", "libreyolo.models._vit.rope", "libreyolo.models.depth_anything3.nn",
           "libreyolo.models.depth_anything3.convert", "libreyolo.models.depth_anything3.postprocess",
           "libreyolo.ops.points", "libreyolo.tasks.point.metrics", "libreyolo.tasks.point.scoring",
           "libreyolo.engine.points_io", "libreyolo.models._base.point", "libreyolo.models.fomo.nn",
           "libreyolo.models.fomo.convert", "libreyolo.tasks.restore", "libreyolo.tasks.restore.metrics",
           "libreyolo.tasks.restore.scoring", "libreyolo.engine.restore_io", "libreyolo.data.restore",
           "libreyolo.data.shapes_restore", "libreyolo.models._base.restore", "libreyolo.models.nafnet.nn",
           "libreyolo.models.nafnet.convert", "libreyolo.models.esrgan.nn", "libreyolo.models.esrgan.convert",
           "libreyolo.convert.basicsr", "libreyolo.models._base.registry",
           "libreyolo.data.segment", "libreyolo.data.shapes_seg",
           "libreyolo.engine.masks", "libreyolo.tasks.segment.masks", "libreyolo.tasks.segment.scoring",
           "libreyolo.models.yolo9_seg.nn", "libreyolo.models.yolo9_seg.postprocess",
           "libreyolo.models.yolo9_seg.loss", "libreyolo.models.yolo9_seg.convert",
           "libreyolo.models.rtmdet_ins.nn", "libreyolo.models.rtmdet_ins.postprocess",
           "libreyolo.models.rtmdet_ins.loss", "libreyolo.models.rtmdet_ins.family", "libreyolo.models._rtmdet.convert",
           "libreyolo.models._vit.towers", "libreyolo.models._vit.zero_shot", "libreyolo.models._vit.tower_convert",
           "libreyolo.models._vit.text_embeddings", "libreyolo.models.clip.tokenizer", "libreyolo.models.clip.text",
           "libreyolo.models._yolonas.blocks", "libreyolo.models.yolonas.nn", "libreyolo.models.yolonas.convert",
           "libreyolo.models.yolonas.family",
           "libreyolo.layers.window_attention", "libreyolo.layers.init", "libreyolo.models.swinir.nn", "libreyolo.models.swinir.convert",
           "libreyolo.data.pose", "libreyolo.data.shapes_pose", "libreyolo.ops.keypoints", "libreyolo.engine.keypoints",
           "libreyolo.tasks.pose", "libreyolo.tasks.pose.scoring", "libreyolo.models.yolo9_pose.nn",
           "libreyolo.models.yolo9_pose.postprocess", "libreyolo.models.yolo9_pose.loss",
           "libreyolo.models.yolo9_pose.convert",
           "libreyolo.models._gelan.pose", "libreyolo.models._yolonas.convert", "libreyolo.models._yolonas.variants",
           "libreyolo.models.deimv2.nn", "libreyolo.models._detr.deimv2_convert", "libreyolo.models.rtdetrv4.nn",
           "libreyolo.models.yolonas_pose.nn", "libreyolo.models.yolonas_pose.postprocess",
           "libreyolo.models.yolonas_pose.family",
           "libreyolo.tasks.prompt", "libreyolo.tasks.prompt.scoring", "libreyolo.engine.prompts_io",
           "libreyolo.models._sam.loss",
           "libreyolo.models.yolo1.nn", "libreyolo.models.yolo1.loss", "libreyolo.models.yolo1.family",
           "libreyolo.models._darknet.local",
           "libreyolo.tasks.matte.metrics", "libreyolo.tasks.matte.scoring", "libreyolo.engine.matte_io",
           "libreyolo.data.matte", "libreyolo.data.shapes_matte", "libreyolo.models._base.matte",
           "libreyolo.models.birefnet.nn", "libreyolo.models.birefnet.convert", "libreyolo.layers.deform_conv",
           "libreyolo.data.maps", "libreyolo.tasks.base", "libreyolo.models._base.convert_rules",
           "libreyolo.tasks.ocr.scoring", "libreyolo.engine.ocr_io",
           "libreyolo.data.ocr", "libreyolo.data.shapes_ocr", "libreyolo.models.ppocr.postprocess",
           "libreyolo.models.ppocr.loss", "libreyolo.models.ppocr.charset", "libreyolo.models.ppocr.nn",
           "libreyolo.models.ppocr.cls", "libreyolo.models.ppocr.family",
           "libreyolo.models._vit.windowed", "libreyolo.models._detr.lwdetr",
           "libreyolo.models.depth_anything3.metric")

PREAMBLE = "import torch\nfrom pathlib import Path\nfrom libreyolo import LibreYOLO, SAMPLE_IMAGE\n"

_M = "libreyolo.model.Model."
_R = "libreyolo.engine.results.Results."
REQUIRED = (
    "libreyolo.model.LibreYOLO", "libreyolo.model.Model",
    *(_M + m for m in ("predict", "track", "train", "val", "export", "quantize", "dequantize", "quant_info",
                       "capture_graph", "graph_info", "release_graphs", "fuse", "to", "save", "info",
                       "prepared", "load_weights")),
    "libreyolo.engine.results", "libreyolo.engine.results.Results",
    *(_R + m for m in ("update", "__getitem__", "new", "cpu", "numpy", "to", "counts", "verbose", "summary",
                       "to_df", "to_csv", "to_json", "plot", "save", "save_txt", "crops", "save_crop")),
    *("libreyolo.engine.results_maps.MapsMixin." + m for m in ("save_mask", "save_depth", "save_alpha")),
    "libreyolo.engine.boxes.Boxes",
    *("libreyolo.engine.boxes.Boxes." + m for m in ("cpu", "to", "numpy", "tolist")),
    "libreyolo.engine.boxes.Probs",
    *("libreyolo.engine.boxes.Probs." + m for m in ("cpu", "to", "numpy", "tolist")),
    "libreyolo.tasks.detect.results.DetMetrics",
    *("libreyolo.tasks.detect.results.DetMetrics." + m for m in ("summary", "to_dict", "to_json")),
    "libreyolo.tasks.semantic.scoring.SemMetrics", "libreyolo.tasks.semantic.metrics.scores",
    "libreyolo.tasks.semantic.metrics.confusion", "libreyolo.tasks.semantic.maps.to_original",
    "libreyolo.data.semantic.load_semantic_data", "libreyolo.data.shapes_sem.ensure_shapes_sem_dataset",
    "libreyolo.tasks.depth.scoring.DepthMetrics", "libreyolo.tasks.depth.metrics.align_disparity",
    "libreyolo.tasks.depth.metrics.depth_errors", "libreyolo.tasks.depth.maps.to_original",
    "libreyolo.data.depth.load_depth_data", "libreyolo.data.shapes_depth.ensure_shapes_depth_dataset",
    "libreyolo.tasks.matte.scoring.MatteMetrics", "libreyolo.tasks.matte.metrics.matte_errors",
    "libreyolo.tasks.matte.metrics.s_measure", "libreyolo.data.matte.load_matte_data",
    "libreyolo.data.shapes_matte.ensure_shapes_matte_dataset", "libreyolo.models._base.matte.MatteLoss",
    "libreyolo.tasks.point.scoring.PointMetrics", "libreyolo.tasks.point.metrics.match_points",
    "libreyolo.ops.points.centroid_targets", "libreyolo.ops.points.decode_points", "libreyolo.engine.points_io",
    "libreyolo.data.segment.parse_polygon_file", "libreyolo.data.segment.load_segment_data",
    "libreyolo.data.shapes_seg.ensure_shapes_seg_dataset", "libreyolo.engine.masks.Masks",
    "libreyolo.tasks.segment.masks.to_original", "libreyolo.tasks.segment.scoring.mask_map",
    "libreyolo.data.pose.parse_pose_file", "libreyolo.data.pose.load_pose_data", "libreyolo.data.pose.flip_keypoints_lr",
    "libreyolo.data.shapes_pose.ensure_shapes_pose_dataset", "libreyolo.engine.keypoints.Keypoints",
    "libreyolo.tasks.pose.keypoints_to_original", "libreyolo.tasks.pose.scoring.keypoint_map",
    "libreyolo.ops.keypoints.metric_sigmas",
    "libreyolo.training.config.TrainConfig",
    "libreyolo.registry.families", "libreyolo.registry.get_family", "libreyolo.registry.parse_weights_name",
    "libreyolo.bench.run.run_benchmark",
    "libreyolo.models.clip.tokenizer.CLIPTokenizer", "libreyolo.models.clip.text.TextTower",
    "libreyolo.models.clip.text.load_text_tower", "libreyolo.models._vit.zero_shot.ZeroShotFamily.set_classes",
)

# properties shown in their class's example rather than each in its own docstring
PROPERTIES = {
    "libreyolo.engine.boxes.Boxes": ("data", "xyxy", "conf", "cls", "xywh", "xyxyn", "xywhn", "id",
                                     "is_track", "shape"),
    "libreyolo.engine.boxes.Probs": ("data", "top1", "top5", "top1conf", "top5conf", "shape"),
    "libreyolo.tasks.detect.results.DetMetrics": ("ap_class_index", "maps", "confusion_matrix_normalized",
                                                  "per_class", "confusion_matrix", "speed"),
}

SKIP_ALLOWED = {_M + "capture_graph"}  # needs a CUDA GPU


def _collect() -> dict[str, doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    found: dict[str, doctest.DocTest] = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for test in finder.find(module, name):
            if test.examples:
                found[test.name] = test
    return found


TESTS = _collect()


def _run(found: doctest.DocTest) -> tuple[doctest.TestResults, str]:
    """Run one docstring's examples with the module's globals plus :data:`PREAMBLE`."""
    globs: dict = {}
    exec(PREAMBLE, globs)  # noqa: S102 - the fixed imports the examples assume
    globs.update(found.globs)
    test = doctest.DocTest(found.examples, globs, found.name, found.filename, found.lineno, found.docstring)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    return runner.run(test, out=report.append), "".join(report)


_NUMPY_DEFAULT_PRINT = {"edgeitems": 3, "infstr": "inf", "linewidth": 75, "nanstr": "nan", "precision": 8,
                        "suppress": False, "threshold": 1000, "formatter": None, "sign": "-", "floatmode": "maxprec",
                        "legacy": False}
_TORCH_PRINT_KEYS = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")


@pytest.mark.parametrize("name", sorted(TESTS))
def test_example_runs(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LIBREYOLO_DATASETS_DIR", str(tmp_path / "datasets"))
    # the examples show arrays as a fresh interpreter prints them: another package imported earlier
    # in the same test process (Ultralytics sets wide, short print options on import) must not matter
    np_opts, torch_opts = np.get_printoptions(), torch._tensor_str.PRINT_OPTS.__dict__.copy()
    np.set_printoptions(**_NUMPY_DEFAULT_PRINT)
    torch.set_printoptions(profile="default")
    try:
        result, report = _run(TESTS[name])
    finally:
        np.set_printoptions(**np_opts)
        torch.set_printoptions(**{k: v for k, v in torch_opts.items() if k in _TORCH_PRINT_KEYS})
    assert result.attempted > 0 or name in SKIP_ALLOWED, f"{name}: no example ran"
    assert result.failed == 0, report


def test_a_wrong_example_fails() -> None:
    """The harness reports a wrong output and an exception (it does not pass everything)."""
    text = ">>> LibreYOLO.__name__\n'LibreYOLO'\n>>> 1 + 1\n3\n>>> get_family('nope')\n"
    test = doctest.DocTestParser().get_doctest(text, {"get_family": get_family}, "bad", None, 0)
    result, report = _run(test)
    assert (result.attempted, result.failed) == (3, 2)
    assert "Expected:\n    3\nGot:\n    2" in report and "ConfigError" in report


@pytest.mark.parametrize("name", REQUIRED)
def test_public_api_has_example(name: str) -> None:
    test = TESTS.get(name)
    assert test is not None and test.examples, f"{name} has no Example: section"
    if name not in SKIP_ALLOWED:
        assert any(not ex.options.get(doctest.SKIP) for ex in test.examples), f"{name}: every example is SKIP"


def test_skip_only_where_allowed() -> None:
    skipped = sorted(n for n, t in TESTS.items() if any(ex.options.get(doctest.SKIP) for ex in t.examples))
    assert set(skipped) <= SKIP_ALLOWED, f"examples marked SKIP outside {sorted(SKIP_ALLOWED)}: {skipped}"


@pytest.mark.parametrize("cls", sorted(PROPERTIES))
def test_properties_shown(cls: str) -> None:
    sources = "".join(ex.source for n, t in TESTS.items() if n == cls or n.startswith(cls + ".")
                      for ex in t.examples)
    missing = [p for p in PROPERTIES[cls] if f".{p}" not in sources]
    assert not missing, f"{cls}: no example uses {missing}"

"""PP-OCR's per-call options (``box_threshold``, ``angle_classification``) belong to the calling
thread: two threads predicting with one model in different scopes each see only their own, and
leaving a scope restores exactly what was in force before it (nested or overlapping exits)."""

from __future__ import annotations

import copy
import threading
from typing import Any

import torch

from libreyolo.models.ppocr.family import PPOCR

BOX_THRESH = 0.6  # PaddleOCR's det_db_box_thresh: the eager stage's threshold outside any scope


def _family() -> PPOCR:
    torch.manual_seed(0)
    fam = PPOCR(size="tiny")
    fam.net.eval()
    fam.net.cls_loaded.fill_(True)  # allow angle_classification(True) (the weights are random)
    return fam


def _recording(fam: PPOCR) -> dict[int, list[float]]:
    """Wrap ``fam.find_boxes`` to record, per thread, the box threshold the eager stage passes."""
    seen: dict[int, list[float]] = {}
    find = fam.find_boxes

    def spy(prob: torch.Tensor, *, box_thresh: float = BOX_THRESH) -> Any:
        seen.setdefault(threading.get_ident(), []).append(box_thresh)
        return find(prob, box_thresh=box_thresh)

    fam.find_boxes = spy  # type: ignore[method-assign]
    return seen


def test_two_threads_in_overlapping_scopes_each_see_their_own() -> None:
    fam = _family()
    seen = _recording(fam)
    recognise = fam.forward_stages()[1].fn
    x = torch.rand(1, 3, 64, 64)
    with torch.inference_mode():
        prob = fam.net(x)
    both_inside, both_read = threading.Barrier(2, timeout=30), threading.Barrier(2, timeout=30)
    got: dict[str, Any] = {}
    errors: list[BaseException] = []

    def worker(tag: str, angle: bool, conf: float) -> None:
        try:
            with fam.angle_classification(angle), fam.box_threshold(conf):
                both_inside.wait()  # the other thread's scopes are open too
                enabled = fam.angle_cls_enabled
                with torch.inference_mode():
                    *_, angle_probs = recognise((x, prob))
                both_read.wait()  # neither leaves its scopes before the other has read
            got[tag] = (enabled, angle_probs.shape[1], seen[threading.get_ident()])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            both_inside.abort()
            both_read.abort()

    threads = [threading.Thread(target=worker, args=("on", True, 0.3)),
               threading.Thread(target=worker, args=("off", False, 0.8))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert got["on"] == (True, 2, [0.3])  # classified (angle probs Tensor[n, 2]), its own threshold
    assert got["off"] == (False, 0, [0.8])  # not classified (Tensor[n, 0])
    # nothing left behind: the default (weights loaded -> on) and PaddleOCR's threshold
    assert fam.angle_cls_enabled
    with torch.inference_mode():
        recognise((x, prob))
    assert seen[threading.get_ident()] == [BOX_THRESH]


def _threshold_probe(fam: PPOCR) -> Any:
    """A function running the eager stage once and returning the box threshold it used."""
    seen = _recording(fam)
    recognise = fam.forward_stages()[1].fn
    x = torch.rand(1, 3, 64, 64)
    with torch.inference_mode():
        prob = fam.net(x)

    def thresh() -> float:
        with torch.inference_mode():
            recognise((x, prob))
        return seen[threading.get_ident()].pop()

    return thresh


def test_nested_scopes_restore_what_they_replaced() -> None:
    fam = _family()
    thresh = _threshold_probe(fam)
    with fam.angle_classification(False), fam.box_threshold(0.3):
        assert not fam.angle_cls_enabled and thresh() == 0.3
        with fam.angle_classification(True), fam.box_threshold(0.5):
            assert fam.angle_cls_enabled and thresh() == 0.5
            with fam.angle_classification(None):
                assert fam.angle_cls_enabled  # None: where the weights were loaded
        assert not fam.angle_cls_enabled and thresh() == 0.3
    assert fam.angle_cls_enabled and thresh() == BOX_THRESH


def test_overlapping_exits_leave_nothing_behind() -> None:
    """Scopes left out of order (A opened, B opened, A left, B left): B stays in force until it is
    left, and afterwards the defaults are back."""
    fam = _family()
    thresh = _threshold_probe(fam)
    a, b = fam.angle_classification(True), fam.angle_classification(False)
    ta, tb = fam.box_threshold(0.3), fam.box_threshold(0.5)
    a.__enter__(), ta.__enter__()
    b.__enter__(), tb.__enter__()
    a.__exit__(None, None, None), ta.__exit__(None, None, None)
    assert not fam.angle_cls_enabled and thresh() == 0.5  # B's
    b.__exit__(None, None, None), tb.__exit__(None, None, None)
    fam.net.cls_loaded.fill_(False)
    assert not fam.angle_cls_enabled and thresh() == BOX_THRESH  # the defaults, not A's


def test_a_copy_starts_without_the_originals_scopes() -> None:
    """The prepared twin is a shallow copy: it has scope stacks of its own (and copies cleanly)."""
    fam = _family()
    with fam.angle_classification(False), fam.box_threshold(0.3):
        twin = copy.copy(fam)
        assert twin.angle_cls_enabled and not fam.angle_cls_enabled
        with twin.angle_classification(False):
            assert not twin.angle_cls_enabled
    assert fam.angle_cls_enabled and twin.angle_cls_enabled

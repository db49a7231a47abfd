"""A ``-pose`` / ``-seg`` weights name on a family without that task fails at once, in one line
naming the families that do the task (not with a list of Hub look-ups)."""

from __future__ import annotations

import pytest

from libreyolo import LibreYOLO
from libreyolo.errors import ConfigError
from libreyolo.registry import families


@pytest.mark.parametrize(("name", "families_named"), [
    ("LibreYOLO9t-pose.pt", ("yolo9_pose", "yolonas_pose", "LibreYOLO9poset-pose.pt")),
    ("LibreYOLOXs-pose.pt", ("yolo9_pose", "yolonas_pose")),
    ("LibreYOLO9t-seg.pt", ("yolo9_seg", "rtmdet_ins", "LibreYOLO9segt-seg.pt")),
])
@pytest.mark.parametrize("pretrained", [True, False])
def test_task_suffix_on_a_family_without_the_task(name: str, families_named: tuple[str, ...], pretrained: bool,
                                                  tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        LibreYOLO(name, pretrained=pretrained)
    msg = str(e.value)
    assert "\n" not in msg and "does not do" in msg and "Tried" not in msg, msg
    for f in families_named:
        assert f in msg, msg


def test_building_a_family_for_a_task_it_lacks_names_the_families_that_do_it() -> None:
    with pytest.raises(ConfigError, match="yolo9_pose") as e:
        families()["yolo9"](size="t", task="pose", nc=3)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("name", "meant"), [
    ("LibreSwint.pt", "LibreSwint-cls.pt"),
    ("LibreSegFormerb0.pt", "LibreSegFormerb0-sem.pt"),
    ("LibreYOLO9segt.pt", "LibreYOLO9segt-seg.pt"),
])
def test_a_name_without_its_task_suffix_names_the_familys_own_weights(name: str, meant: str, tmp_path,
                                                                       monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        LibreYOLO(name, pretrained=False)
    msg = str(e.value)
    assert "\n" not in msg and f"did you mean {meant!r}" in msg, msg
    assert "yolox" not in msg, msg  # not the list of every detector

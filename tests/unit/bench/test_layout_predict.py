"""benchmarks/layout_predict.py off the GPU: the arms it builds and the rule that turns its
timings into recommended family flags."""

from __future__ import annotations

import pytest
import torch

from benchmarks import layout_predict


@pytest.fixture(scope="module")
def layout():
    return layout_predict


def _row(ms):
    return {f"{d}_{a}_graph_ms": v for (d, a), v in ms.items()}


def test_channels_last_is_recommended_only_when_it_wins_in_both_dtypes(layout):
    wins = layout.recommend(_row({("float16", "nchw"): 2.0, ("float16", "cl"): 1.5, ("float16", "cl_ba"): 1.2,
                                   ("float16", "nchw_ba"): 2.0, ("float32", "nchw_ba"): 3.0,
                                    ("float32", "nchw"): 3.0, ("float32", "cl"): 2.9, ("float32", "cl_ba"): 2.9}),
                            0.97)
    assert wins["recommend"] == {"INFER_CHANNELS_LAST": True, "GRAPH_BIAS_ACT": True}
    assert wins["cl_over_nchw"] == {"float16": 0.75, "float32": round(2.9 / 3.0, 4)}
    # a big fp16 gain does not carry a dtype that is more than 5 % slower
    mixed = layout.recommend(_row({("float16", "nchw"): 2.0, ("float16", "cl"): 1.0, ("float16", "cl_ba"): 1.0,
                                     ("float32", "nchw"): 3.0, ("float32", "cl"): 3.3, ("float32", "cl_ba"): 3.3}),
                             0.97)
    assert mixed["recommend"] == {"INFER_CHANNELS_LAST": False, "GRAPH_BIAS_ACT": False}
    # NCHW kept, and its own epilogue arm decides the epilogue (not the channels-last one)
    nchw = layout.recommend(_row({("float16", "nchw"): 1.0, ("float16", "nchw_ba"): 0.8, ("float16", "cl"): 1.2,
                                  ("float16", "cl_ba"): 1.0, ("float32", "nchw"): 1.0, ("float32", "nchw_ba"): 0.9,
                                  ("float32", "cl"): 1.1, ("float32", "cl_ba"): 1.1}), 0.97)
    assert nchw["recommend"] == {"INFER_CHANNELS_LAST": False, "GRAPH_BIAS_ACT": True}
    # a tie is not a win, and no timing is no recommendation
    tie = layout.recommend(_row({("float32", "nchw"): 1.0, ("float32", "cl"): 0.99, ("float32", "cl_ba"): 0.99}), 0.97)
    assert tie["recommend"]["INFER_CHANNELS_LAST"] is False
    assert layout.recommend({}, 0.97)["recommend"] == {"INFER_CHANNELS_LAST": False, "GRAPH_BIAS_ACT": False}


def test_every_arm_is_a_fused_cast_twin_with_its_layout(layout):
    from libreyolo.graphs.parity import build_probe_model
    from libreyolo.registry import families

    model = build_probe_model(families()["yolo9"], size="t", task="detect", device="cpu", seed=0, fuse=False)
    for arm in layout.ARMS:
        twin = layout.build_arm(model, arm, torch.bfloat16)
        assert twin is not model and twin.fused and not model.fused
        assert twin.prep_spec.channels_last is arm.startswith("cl")
        assert twin.GRAPH_BIAS_ACT is arm.endswith("_ba")
        conv = next(m for m in twin.net.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3))
        assert conv.weight.dtype == torch.bfloat16
        assert conv.weight.is_contiguous(memory_format=torch.channels_last) is arm.startswith("cl")
    # the family's own flags are untouched by the arms
    assert type(model).GRAPH_BIAS_ACT is True and "GRAPH_BIAS_ACT" not in vars(model)
    # fp32 NCHW still builds a fused copy (build_twin alone would return the model itself)
    twin = layout.build_arm(model, "nchw", torch.float32)
    assert twin is not model and twin.fused


def test_default_list_names_real_families_and_sizes(layout):
    from libreyolo.registry import families

    fams = families()
    for spec in layout.DEFAULT.split():
        name, size, side = spec.split(":")
        assert name in fams, spec
        assert size == "first" or size in fams[name].SIZES, spec
        assert int(side) % 32 == 0 or int(side) in (224, 448, 416), spec

from __future__ import annotations

import pytest
import torch

from libreyolo.graphs.seam import Stage, flatten, run_eager, unflatten


def test_flatten_roundtrip_keeps_structure_and_identity():
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    tree = (a, [b, None, 3], {"k": c, "s": "x"})
    leaves, spec = flatten(tree)
    assert [t is u for t, u in zip(leaves, (a, b, c), strict=False)] == [True, True, True]
    back = unflatten(spec, leaves)
    assert isinstance(back, tuple) and isinstance(back[1], list) and isinstance(back[2], dict)
    assert back[0] is a and back[1][0] is b and back[1][1] is None and back[1][2] == 3
    assert back[2]["k"] is c and back[2]["s"] == "x"


def test_flatten_single_tensor_and_spec_equality():
    x = torch.zeros(2)
    leaves, spec = flatten(x)
    assert leaves == [x] and unflatten(spec, [x]) is x
    assert flatten((torch.zeros(1), torch.zeros(2)))[1] == flatten((torch.ones(5), torch.ones(1)))[1]
    assert flatten((torch.zeros(1),))[1] != flatten([torch.zeros(1)])[1]


def test_unflatten_rejects_extra_leaves():
    _, spec = flatten(torch.zeros(1))
    with pytest.raises(ValueError):
        unflatten(spec, [torch.zeros(1), torch.zeros(1)])


def test_run_eager_chains_stages_in_order():
    stages = [Stage(name="a", fn=lambda x: x + 1), Stage(name="b", fn=lambda x: x * 3, capturable=False)]
    assert run_eager(stages, torch.tensor(1.0)).item() == 6.0

"""GPU test of the loop's lean optimiser step (:class:`libreyolo.training.optim.OptimizerStep`):
on CUDA, with the optimisers :func:`build_optimizer` makes there (fused AdamW / SGD) and AMP's
gradient scaler, the lean path gives the same weights, optimiser state and loss scale, bit for
bit, as torch's own fused step, on a real detector (yolo9-t, 675 parameter tensors)."""

from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("name", ["auto", "SGD"])
def test_lean_step_equals_torch_step_on_cuda(name: str) -> None:
    from libreyolo import LibreYOLO
    from libreyolo.training.optim import OptimizerStep, build_optimizer, choose_optimizer

    dev = torch.device("cuda")
    torch.manual_seed(0)
    nets = [LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=6).net.to(dev).train()]
    nets.append(copy.deepcopy(nets[0]))
    start = [p.detach().clone() for p in nets[0].parameters()]
    choice = choose_optimizer(name=name, lr0=0.01, momentum=0.937, nc=6, total_steps=100)
    opts = [build_optimizer(n, choice, weight_decay=5e-4, device=dev) for n in nets]
    assert all(g["fused"] for g in opts[0].param_groups)
    scalers = [torch.amp.GradScaler("cuda", enabled=True, init_scale=2.0**10, growth_interval=2) for _ in nets]
    steps = [OptimizerStep(n, o, s, clip_grad=1.0) for n, o, s in zip(nets, opts, scalers, strict=True)]
    steps[1].kind = None  # reference: torch.optim's path
    x = torch.rand(2, 3, 160, 160, device=dev, generator=torch.Generator(device=dev).manual_seed(1))
    for it in range(5):
        for n, o, s, st in zip(nets, opts, scalers, steps, strict=True):
            o.zero_grad(set_to_none=False)
            with torch.autocast("cuda", dtype=torch.float16):
                out = n(x)
            flat = out if isinstance(out, torch.Tensor) else torch.cat([t.float().flatten() for t in
                                                                        torch.utils._pytree.tree_leaves(out)])
            loss = flat.float().square().mean() * (float("inf") if it == 2 else 1.0)
            s.scale(loss).backward()
            st()
        assert scalers[0].get_scale() == scalers[1].get_scale(), it
        for (k, a), b in zip(nets[0].named_parameters(), nets[1].parameters(), strict=True):
            assert torch.equal(a, b), (it, k)
    assert steps[0].lean_steps == 4 and steps[1].lean_steps == 0
    assert sum(not torch.equal(a, b) for a, b in zip(nets[0].parameters(), start, strict=True)) > len(start) // 2
    sa, sb = opts[0].state_dict()["state"], opts[1].state_dict()["state"]
    for k in sa:
        for key, v in sa[k].items():
            assert torch.equal(v, sb[k][key]), (k, key)

"""The CUDA-graph check the dense detectors' unit tests share (test_yolo7.py, test_yolo9.py):
the forward captures (no host syncs, static shapes) and replays bit-identically to eager on two
inputs from different distributions (a forgotten copy would return the first input's result)."""

from __future__ import annotations

import torch
from torch import nn


def check_graph_replay_equals_eager(net: nn.Module, shape: tuple[int, int, int, int] = (2, 3, 128, 160)) -> None:
    """Warm up on a side stream, capture ``net`` on a zero input of ``shape``, then for a uniform
    and a narrow normal input: eager outputs equal the replayed ones bit for bit."""
    static_x = torch.zeros(*shape, device="cuda")
    with torch.inference_mode():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                net(static_x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            static_out = net(static_x)
        probes = [torch.rand(*shape, device="cuda"), torch.randn(*shape, device="cuda").mul_(0.2).add_(0.5)]
        for x in probes:
            eager = [o.clone() for o in net(x)]
            static_x.copy_(x)
            graph.replay()
            torch.cuda.synchronize()
            for e, g in zip(eager, static_out, strict=True):
                assert torch.equal(e, g)

"""Backends: what runs the network of a model (``forward(x) -> raw outputs``).

* :class:`~libreyolo.backends.torch.TorchBackend`: the PyTorch network, eager or replayed from
  CUDA graphs, with its prepared inference twin (fused, cast once to half precision);
* :mod:`libreyolo.backends.exported`: ONNX Runtime, TorchScript and OpenVINO files written by
  ``model.export()``.

Postprocessing never lives here: the model's :class:`~libreyolo.models._base.family.Family`
turns raw outputs into detections or class probabilities, whichever backend produced them.
"""

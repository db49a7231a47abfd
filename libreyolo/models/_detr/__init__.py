"""The DETR lineage: code the encoder-decoder families (rtdetr, rtdetrv2, dfine, deim) share.

Backbones (``resnet_vd``, ``hgnetv2``), encoders (``hybrid_encoder``, ``elan_encoder``), decoders
(``decoder``, ``dfine_decoder``, ``fdr``), denoising, the Hungarian matcher, the criteria
(``losses``, ``dfine_losses``, ``deim_losses``), the assembled networks (``net``, ``dfine_net``)
and the family glue (``family.EncoderDecoderFamily``). It imports ``layers/``, ``ops/``,
``kernels/`` and ``graphs.seam``; no family folder and nothing in ``layers/`` imports back.
"""

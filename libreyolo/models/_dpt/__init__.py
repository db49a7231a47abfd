"""The DPT decoder lineage (Ranftl et al., 2021): the reassemble / fusion neck the Depth Anything
families (``depth_anything``, ``depth_anything3``) share.

``neck`` holds :class:`~.neck.Neck` (four ViT token maps -> the finest fused map: a 1x1 projection
and a resize per map, a 3x3 conv to the fusion width, residual fusion from the coarsest map up) and
the sinusoidal UV position embedding that Depth Anything 3's head adds to its maps. It imports
``torch`` only; no code here branches on a family name.
"""

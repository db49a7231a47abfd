"""The original release checkpoints of D-FINE (Peterande/D-FINE: ``dfine_{n,s}_coco.pth``) and
DEIM-D-FINE (ShihuaHuang95/DEIM: ``deim_dfine_hgnetv2_{n,s}_coco.pth``) onto
:class:`~.dfine_net.DFineDetector`; the ``dfine`` and ``deim`` families' ``convert.py`` use it.

Facts, from the reference modules (D-FINE ``src/nn/backbone/hgnetv2.py``,
``src/zoo/dfine/hybrid_encoder.py``, ``src/zoo/dfine/dfine_decoder.py``; DEIM's ``engine/backbone``
and ``engine/deim`` copies have the same module names) and transformers' D-FINE conversion script
(``convert_d_fine_original_pytorch_checkpoint_to_hf.py``, its table of original names):

* HGNetv2 ``ConvBNAct`` is ``conv`` / ``bn`` / ``lab``; ours wraps conv and norm in one more module:
  ``<p>.conv.weight`` -> ``<p>.conv.conv.weight``, ``<p>.bn.*`` -> ``<p>.conv.bn.*``, ``<p>.lab.*``
  unchanged, for ``stem.stem{1,2a,2b,3,4}``, ``stages.<i>.downsample``,
  ``stages.<i>.blocks.<j>.layers.<k>`` and ``...aggregation.<k>``; the light blocks'
  ``layers.<k>.conv1`` / ``conv2`` are ours ``layers.<k>.0`` / ``.1``.
* HybridEncoder: ``input_proj.<i>.conv`` / ``.norm`` -> ``input_proj.<i>.0`` / ``.1``;
  ``encoder.<i>.layers.<j>`` -> ``encoder.<i>.<j>`` (``nn.MultiheadAttention`` names kept);
  ``downsample_convs.<i>.0.cv{1,2}`` (an ``nn.Sequential`` around ``SCDown``) ->
  ``downsample_convs.<i>.cv{1,2}``; ``norm`` -> ``bn`` in the lateral, FPN and PAN convs.
* DFINETransformer: ``decoder.decoder.layers`` / ``decoder.decoder.lqe_layers`` ->
  ``decoder.layers`` / ``decoder.lqe_layers``; ``enc_output.proj`` / ``.norm`` -> ``enc_output.0`` /
  ``.1``; ``input_proj.<i>.conv`` / ``.norm`` -> ``.0`` / ``.1`` (n and s have none: identity); the
  heads (``enc_score_head``, ``enc_bbox_head``, ``dec_score_head``, ``dec_bbox_head``,
  ``pre_bbox_head``, ``query_pos_head``, ``denoising_class_embed``) keep their names.
* BatchNorm eps: the reference's backbone BatchNorms use PyTorch's 1e-5, ours (HGNetv2 on
  :class:`~libreyolo.layers.conv.ConvBNAct`) ``BN_EPS`` = 1e-3; the backbone BatchNorm weights are
  rescaled (:func:`~libreyolo.models._base.convert_rules.fold_bn_eps`, exact in eval) so that the
  network computes the reference's function. Every other tensor is copied as it is.
* Dropped: the constants our network computes — ``decoder.up`` and ``decoder.reg_scale`` (frozen
  parameters, also held as ``decoder.decoder.up`` / ``.reg_scale``; checked against ours),
  ``cross_attn.num_points_scale``, and the 640 px ``decoder.anchors`` / ``decoder.valid_mask``.

D-FINE and DEIM-D-FINE files hold the same names and shapes (DEIM changes activations, which have
no weights), so the file name tells them apart: the reader sets ``arch`` to ``"deim_dfine"`` when
the name contains ``deim``, ``"dfine"`` otherwise. A ``deim_dfine`` file is ``deim`` by default
and ``dfine`` only when asked for by name; any other is ``dfine`` by default and ``deim`` when named
(:func:`deim_explicit_only`, :func:`dfine_explicit_only`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from ...layers.conv import BN_EPS
from .._base.convert_rules import fit, fold_bn_eps, rename_all
from .hf_convert import convert_dfine_state_dict, match_dfine

SOURCE = "dfine_release"  # libreyolo.convert.dfine_release.SOURCE
ARCHS = ("dfine", "deim_dfine")
_CONSTANTS = {"up": 0.5, "reg_scale": 4.0}  # our decoder's (dfine_decoder.FDRDecoder defaults)
REFERENCE_BN_EPS = 1e-5  # nn.BatchNorm2d's default, used throughout the reference

_DROP = re.compile(r"^decoder\.(decoder\.)?(up|reg_scale)$|^decoder\.(anchors|valid_mask)$|\.num_points_scale$")
_BACKBONE = re.compile(r"backbone\.(stem\.stem(?:1|2a|2b|3|4)|stages\.\d+\.downsample"
                       r"|stages\.\d+\.blocks\.\d+\.(?:layers\.\d+(?:\.conv[12])?|aggregation\.\d+))"
                       r"\.(conv|bn|lab)\.(\w+)")
_HEADS = re.compile(r"decoder\.(enc_score_head|enc_bbox_head|dec_score_head|dec_bbox_head|pre_bbox_head"
                    r"|query_pos_head|denoising_class_embed)\..+")


def rename_release_key(key: str) -> str | None:
    """Our name for one key of an original D-FINE / DEIM state dict, ``None`` for its constants.

    Example:
        >>> rename_release_key("backbone.stages.2.blocks.0.layers.1.conv2.bn.running_var")
        'backbone.stages.2.blocks.0.layers.1.1.conv.bn.running_var'
        >>> rename_release_key("encoder.downsample_convs.0.0.cv2.norm.weight")
        'encoder.downsample_convs.0.cv2.bn.weight'
        >>> rename_release_key("decoder.decoder.layers.0.cross_attn.num_points_scale") is None
        True
    """
    if _DROP.search(key):
        return None
    if m := _BACKBONE.fullmatch(key):
        path = re.sub(r"(layers\.\d+)\.conv([12])$", lambda c: f"{c[1]}.{int(c[2]) - 1}", m[1])
        return f"backbone.{path}.{'lab' if m[2] == 'lab' else 'conv.' + m[2]}.{m[3]}"
    if m := re.fullmatch(r"(encoder|decoder)\.input_proj\.(\d+)\.(conv|norm)\.(\w+)", key):
        return f"{m[1]}.input_proj.{m[2]}.{0 if m[3] == 'conv' else 1}.{m[4]}"
    if m := re.fullmatch(r"encoder\.encoder\.(\d+)\.layers\.(\d+)\.(.+)", key):
        return f"encoder.encoder.{m[1]}.{m[2]}.{m[3]}"
    if m := re.fullmatch(r"encoder\.downsample_convs\.(\d+)\.0\.(cv[12])\.(conv|norm)\.(\w+)", key):
        return f"encoder.downsample_convs.{m[1]}.{m[2]}.{'conv' if m[3] == 'conv' else 'bn'}.{m[4]}"
    if m := re.fullmatch(r"encoder\.(lateral_convs|fpn_blocks|pan_blocks)\.(.+)", key):
        return f"encoder.{m[1]}." + re.sub(r"(^|\.)norm\.", r"\1bn.", m[2])
    if m := re.fullmatch(r"decoder\.decoder\.(layers|lqe_layers)\.(.+)", key):
        return f"decoder.{m[1]}.{m[2]}"
    if m := re.fullmatch(r"decoder\.enc_output\.(proj|norm)\.(\w+)", key):
        return f"decoder.enc_output.{0 if m[1] == 'proj' else 1}.{m[2]}"
    if _HEADS.fullmatch(key):
        return key
    raise CheckpointError(f"reference key {key!r} is not part of an original D-FINE / DEIM state dict this "
                          "converter knows.")


def convert_release_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *,
                               arch: str = "") -> dict[str, Tensor]:
    """Original D-FINE / DEIM state dict -> ours (first misfit named), the backbone BatchNorm
    weights rescaled from eps 1e-5 to ours (module docstring). The dropped constants ``up`` and
    ``reg_scale`` must equal ours (0.5, 4): the network computes with them."""
    for name, ours in _CONSTANTS.items():
        for key in (f"decoder.{name}", f"decoder.decoder.{name}"):
            if key in src and (src[key].numel() != 1 or float(src[key].reshape(-1)[0]) != ours):
                raise CheckpointError(f"reference '{key}' is {src[key].reshape(-1).tolist()}; this D-FINE computes "
                                      f"with {name} = {ours}.")
    out = fit(rename_all(src, rename_release_key), own)
    backbone = fold_bn_eps({k: v for k, v in out.items() if k.startswith("backbone.")},
                           eps_ref=REFERENCE_BN_EPS, eps_ours=BN_EPS)
    return {**out, **backbone}


def _levels(sd: Mapping[str, Tensor], pattern: str) -> int:
    return len({m[1] for k in sd if (m := re.match(pattern, k))})


def match_release(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for an original D-FINE / DEIM release state dict: the HGNetv2 variant from
    the stem width, then hidden width (``enc_score_head`` input), feature levels (encoder
    ``input_proj``) and decoder layers looked up in the D-FINE size table."""
    from .dfine_variants import VARIANTS

    if getattr(fw, "source", "") != SOURCE:
        return None
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    stem, score = sd.get("backbone.stem.stem1.conv.weight"), sd.get("decoder.enc_score_head.weight")
    if stem is None or score is None:
        raise CheckpointError("this D-FINE / DEIM state dict has no 'backbone.stem.stem1.conv.weight' or "
                              "'decoder.enc_score_head.weight' (not an HGNetv2 D-FINE).")
    width, hidden = int(stem.shape[0]), int(score.shape[1])
    levels = _levels(sd, r"encoder\.input_proj\.(\d+)\.")
    layers = _levels(sd, r"decoder\.decoder\.layers\.(\d+)\.")
    for size, v in VARIANTS.items():
        if (v.net.backbone == "B0" and width == 16 and v.net.hidden == hidden and len(v.net.return_idx) == levels
                and v.net.dec_layers == layers):
            return size, int(score.shape[0])
    raise CheckpointError(f"this D-FINE / DEIM (stem width {width}, hidden {hidden}, {levels} feature levels, "
                          f"{layers} decoder layers) matches none of the sizes {', '.join(VARIANTS)} "
                          "(HGNetv2-B0 nano / small; m, l, x are not built here).")


def match_any(fw: object) -> tuple[str, int] | None:
    """:func:`match_release` for release files, :func:`~.hf_convert.match_dfine` for transformers'."""
    return match_release(fw) if getattr(fw, "source", "") == SOURCE else match_dfine(fw)


def convert_any(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """The release mapping for the arches the release reader sets (``dfine``, ``deim_dfine``),
    transformers' for the others (``d_fine``)."""
    if arch in ARCHS:
        return convert_release_state_dict(src, own, arch=arch)
    return convert_dfine_state_dict(src, own, arch=arch)


def dfine_explicit_only(fw: object) -> bool:
    """``dfine`` reads a DEIM release file only when asked for by name."""
    return getattr(fw, "source", "") == SOURCE and getattr(fw, "arch", "") == "deim_dfine"


def deim_explicit_only(fw: object) -> bool:
    """``deim`` reads DEIM release files by default; D-FINE files (release or transformers) only
    when asked for by name."""
    return not dfine_explicit_only(fw)

"""Original D-FINE / DEIM release checkpoints (``dfine_{n,s}_coco.pth``, ``deim_dfine_hgnetv2_{n,s}_coco.pth``)
through ``LibreYOLO(path)``, offline: no release file was read. Each test writes a file laid out as the
reference trainers save it (``{"date", "last_epoch", "model", "ema": {"module", "updates"}}``) with a
state dict in the reference's own names, fabricated from our network by :func:`reference_layout` (the
inverse renames, written here from the reference modules: Peterande/D-FINE ``src/nn/backbone/hgnetv2.py``,
``src/zoo/dfine/hybrid_encoder.py``, ``src/zoo/dfine/dfine_decoder.py``, and transformers' D-FINE
conversion table), plus the reference's constants and buffers.

Every tensor loads bitwise as the file holds it, except the backbone BatchNorm weights: the reference's
BatchNorms use eps 1e-5, our HGNetv2's 1e-3, so those are rescaled by ``sqrt(var + 1e-3) / sqrt(var + 1e-5)``
(exact in eval; :func:`expected`).

The layout itself is checked against facts of the reference, not against the converter: exact key names
of its modules, and its parameter counts — 3,782,693 (n) and 10,321,877 (s, also quoted in
``dfine_variants.py``), from ``sum(p.numel() for p in model.parameters())`` of the reference network
built from those files with the n / s configs (a one-off run, not part of this suite).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.convert import convert_foreign, detect_format, read_foreign
from libreyolo.errors import CheckpointError
from libreyolo.models._detr.dfine_variants import VARIANTS
from libreyolo.models.dfine.nn import build_dfine

REFERENCE_PARAMS = {"n": 3_782_693, "s": 10_321_877}
BUFFERS = ("running_mean", "running_var", "num_batches_tracked", "num_points_scale", "anchors", "valid_mask")


def _original_name(k: str) -> str:
    """The reference's name for one of our keys (the inverse of the converter, written independently)."""
    if k.startswith("backbone."):
        k = re.sub(r"(layers\.\d+)\.([01])\.(conv|lab)\.", lambda m: f"{m[1]}.conv{int(m[2]) + 1}.{m[3]}.", k)
        return k.replace(".conv.conv.", ".conv.").replace(".conv.bn.", ".bn.")
    if k.startswith("encoder.input_proj."):
        return re.sub(r"^(encoder\.input_proj\.\d+)\.0\.", r"\1.conv.", re.sub(r"^(encoder\.input_proj\.\d+)\.1\.",
                                                                             r"\1.norm.", k))
    if k.startswith("encoder.encoder."):
        return re.sub(r"^encoder\.encoder\.(\d+)\.(\d+)\.", r"encoder.encoder.\1.layers.\2.", k)
    if k.startswith("encoder.downsample_convs."):
        k = re.sub(r"^encoder\.downsample_convs\.(\d+)\.", r"encoder.downsample_convs.\1.0.", k)
        return k.replace(".bn.", ".norm.")
    if k.startswith("encoder."):
        return k.replace(".bn.", ".norm.")
    if k.startswith(("decoder.layers.", "decoder.lqe_layers.")):
        return "decoder.decoder." + k[len("decoder."):]
    if k.startswith("decoder.enc_output."):
        return k.replace("enc_output.0.", "enc_output.proj.").replace("enc_output.1.", "enc_output.norm.")
    return k


def reference_layout(own: dict[str, torch.Tensor], size: str) -> dict[str, torch.Tensor]:
    """An original-format state dict with the tensors of ``own`` (our D-FINE state dict)."""
    sd = {_original_name(k): v.clone() for k, v in own.items()}
    cfg = VARIANTS[size].net
    for name, value in (("up", 0.5), ("reg_scale", 4.0)):  # frozen parameters, shared with the inner decoder
        sd[f"decoder.{name}"] = sd[f"decoder.decoder.{name}"] = torch.tensor([value])
    for i in range(cfg.dec_layers):
        sd[f"decoder.decoder.layers.{i}.cross_attn.num_points_scale"] = torch.tensor(
            [1 / n for n in cfg.num_points for _ in range(n)])
    tokens = sum((640 // s) ** 2 for s in (8, 16, 32)[3 - len(cfg.return_idx):])
    sd["decoder.anchors"], sd["decoder.valid_mask"] = torch.zeros(1, tokens, 4), torch.ones(1, tokens, 1)
    return sd


def expected(k: str, ref: dict[str, torch.Tensor]) -> torch.Tensor:
    """What our key ``k`` must hold after loading ``ref`` (an original-format state dict)."""
    v = ref[_original_name(k)]
    if k.startswith("backbone.") and k.endswith(".bn.weight"):
        var = ref[_original_name(k)[: -len("weight")] + "running_var"].double()
        return (v.double() * torch.sqrt(var + 1e-3) / torch.sqrt(var + 1e-5)).to(v.dtype)
    return v


def _own(size: str, seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    sd = build_dfine(size=size, nc=80).state_dict()
    g = torch.Generator().manual_seed(seed + 1)
    # every float tensor random (a fresh init has many equal tensors: zeros, ones, constant biases)
    out = {k: (torch.randn(v.shape, generator=g) if v.is_floating_point() else v) for k, v in sd.items()}
    for k in [k for k in out if k.endswith("running_var")]:
        out[k] = torch.rand(out[k].shape, generator=g) + 0.5  # a variance is positive
    return out


def _save(path: Path, sd: dict[str, torch.Tensor], *, ema: bool = True) -> Path:
    obj: dict[str, object] = {"date": "2024-10-01T00:00:00", "last_epoch": 71,
                              "model": {k: torch.zeros_like(v) for k, v in sd.items()} if ema else sd}
    if ema:
        obj["ema"] = {"module": sd, "updates": 1000}
    torch.save(obj, path)
    return path


@pytest.fixture(scope="module")
def own_n() -> dict[str, torch.Tensor]:
    return _own("n")


@pytest.mark.parametrize("size", ["n", "s"])
def test_fabricated_layout_is_the_reference_layout(size: str) -> None:
    sd = reference_layout(build_dfine(size=size, nc=80).state_dict(), size)
    params = sum(v.numel() for k, v in sd.items() if not k.endswith(BUFFERS) and not k.startswith("decoder.decoder.up")
                 and not k.startswith("decoder.decoder.reg_scale"))
    assert params == REFERENCE_PARAMS[size]
    light = "backbone.stages.2.blocks.0.layers.0"  # stage 3 of B0: light blocks (conv1 1x1, conv2 depthwise)
    for key in ("backbone.stem.stem1.conv.weight", "backbone.stem.stem2a.bn.running_var", "backbone.stem.stem4.lab.scale",
                "backbone.stages.0.blocks.0.layers.0.conv.weight", "backbone.stages.1.downsample.bn.weight",
                f"{light}.conv1.conv.weight", f"{light}.conv2.bn.bias", f"{light}.conv2.lab.bias",
                "backbone.stages.3.blocks.0.aggregation.1.conv.weight", "encoder.input_proj.0.conv.weight",
                "encoder.input_proj.1.norm.running_mean", "encoder.encoder.0.layers.0.self_attn.in_proj_weight",
                "encoder.encoder.0.layers.0.linear2.bias", "encoder.lateral_convs.0.norm.weight",
                "encoder.fpn_blocks.0.cv2.0.bottlenecks.0.conv1.norm.weight", "encoder.pan_blocks.0.cv3.1.conv.weight",
                "encoder.fpn_blocks.0.cv4.norm.running_var", "encoder.downsample_convs.0.0.cv2.conv.weight",
                "decoder.decoder.layers.0.self_attn.out_proj.weight", "decoder.decoder.layers.2.gateway.gate.weight",
                "decoder.decoder.layers.1.cross_attn.sampling_offsets.bias", "decoder.decoder.layers.0.norm3.weight",
                "decoder.decoder.lqe_layers.2.reg_conf.layers.1.weight", "decoder.enc_output.proj.weight",
                "decoder.enc_output.norm.bias", "decoder.dec_bbox_head.2.layers.2.weight", "decoder.pre_bbox_head.layers.0.bias",
                "decoder.query_pos_head.layers.1.weight", "decoder.denoising_class_embed.weight"):
        assert key in sd, key
    assert not any(k.startswith("decoder.input_proj.") for k in sd)  # n and s: feature width == hidden (identity)


def test_dfine_n_release_loads_bitwise_from_ema(tmp_path: Path, own_n: dict[str, torch.Tensor]) -> None:
    ref = reference_layout(own_n, "n")
    path = _save(tmp_path / "dfine_n_coco.pth", ref)
    assert detect_format(path) == "dfine_release"
    fw = read_foreign(path)
    assert (fw.arch, fw.extra["weights"]) == ("dfine", "ema")
    model = LibreYOLO(str(path))
    assert (model.FAMILY, model.size, model.nc) == ("dfine", "n", 80)
    got = model.net.state_dict()
    folded = 0
    for k, v in own_n.items():
        if not k.endswith("num_batches_tracked"):
            assert torch.equal(got[k], expected(k, ref)), k
            folded += not torch.equal(got[k], v)
    assert folded == sum(k.startswith("backbone.") and k.endswith(".bn.weight") for k in own_n)
    native = tmp_path / "native.pt"
    model.save(native)
    assert detect_format(native) is None


def test_model_only_file_and_nc(tmp_path: Path) -> None:
    """DEIM's ``convert_weight.py`` keeps ``{"model": <EMA weights>}``; any class count loads."""
    torch.manual_seed(0)
    own = build_dfine(size="n", nc=3).state_dict()
    ref = reference_layout(own, "n")
    path = _save(tmp_path / "best_stg2.pth", ref, ema=False)
    fw = read_foreign(path)
    assert (fw.arch, fw.extra["weights"]) == ("dfine", "model")
    model = convert_foreign(fw)
    assert (model.FAMILY, model.size, model.nc) == ("dfine", "n", 3)
    assert torch.equal(model.net.state_dict()["decoder.enc_score_head.weight"], own["decoder.enc_score_head.weight"])


def test_dfine_s_release_loads_bitwise(tmp_path: Path) -> None:
    own = _own("s", seed=5)
    ref = reference_layout(own, "s")
    model = LibreYOLO(str(_save(tmp_path / "dfine_s_coco.pth", ref)))
    assert (model.FAMILY, model.size, model.nc) == ("dfine", "s", 80)
    got = model.net.state_dict()
    assert all(torch.equal(got[k], expected(k, ref)) for k in own if not k.endswith("num_batches_tracked"))


def test_deim_release_loads_into_deim(tmp_path: Path, own_n: dict[str, torch.Tensor]) -> None:
    """Same names as D-FINE: the file name decides (``deim`` in it); the other family reads either file
    when asked for by name."""
    ref = reference_layout(own_n, "n")
    deim_path = _save(tmp_path / "deim_dfine_hgnetv2_n_coco.pth", ref)
    model = LibreYOLO(str(deim_path))
    assert (model.FAMILY, model.size) == ("deim", "n")
    assert model.net.cfg.act == "silu"  # DEIM's activations
    got = model.net.state_dict()
    assert all(torch.equal(got[k], expected(k, ref)) for k in own_n if not k.endswith("num_batches_tracked"))
    assert convert_foreign(read_foreign(deim_path), family="dfine").FAMILY == "dfine"
    dfine_path = _save(tmp_path / "dfine_n_coco.pth", ref)
    assert convert_foreign(read_foreign(dfine_path), family="deim").FAMILY == "deim"


def test_unknown_missing_and_misshaped_keys_raise(tmp_path: Path, own_n: dict[str, torch.Tensor]) -> None:
    ref = reference_layout(own_n, "n")
    unknown = dict(ref)
    unknown["decoder.decoder.layers.0.norm2.weight"] = unknown.pop("decoder.decoder.layers.0.norm3.weight")
    with pytest.raises(CheckpointError, match=r"decoder\.decoder\.layers\.0\.norm2\.weight"):
        LibreYOLO(str(_save(tmp_path / "dfine_n_unknown.pth", unknown)))
    foreign = dict(ref)
    foreign["decoder.tgt_embed.weight"] = torch.zeros(300, 128)  # learn_query_content: not built here
    with pytest.raises(CheckpointError, match=r"tgt_embed"):
        LibreYOLO(str(_save(tmp_path / "dfine_n_tgt.pth", foreign)))
    assert "encoder.fpn_blocks.0.cv4.norm.running_var" in ref
    missing = {k: v for k, v in ref.items() if k != "encoder.fpn_blocks.0.cv4.norm.running_var"}
    with pytest.raises(CheckpointError, match=r"encoder\.fpn_blocks\.0\.cv4\.bn\.running_var"):
        LibreYOLO(str(_save(tmp_path / "dfine_n_missing.pth", missing)))
    shaped = dict(ref)
    assert "decoder.decoder.layers.1.linear1.weight" in shaped
    shaped["decoder.decoder.layers.1.linear1.weight"] = torch.zeros(256, 128)
    with pytest.raises(CheckpointError, match=r"linear1\.weight.*shape"):
        LibreYOLO(str(_save(tmp_path / "dfine_n_shape.pth", shaped)))
    scale = dict(ref)
    scale["decoder.reg_scale"] = scale["decoder.decoder.reg_scale"] = torch.tensor([8.0])
    with pytest.raises(CheckpointError, match=r"reg_scale"):
        LibreYOLO(str(_save(tmp_path / "dfine_n_scale.pth", scale)))


def test_size_from_shapes(tmp_path: Path, own_n: dict[str, torch.Tensor]) -> None:
    """n and s differ in hidden width and levels; a wider stem (HGNetv2-B2 and up: D-FINE m, l, x) is
    refused by name, not half-loaded."""
    ref = reference_layout(own_n, "n")
    wide = dict(ref)
    wide["backbone.stem.stem1.conv.weight"] = torch.zeros(24, 3, 3, 3)
    with pytest.raises(CheckpointError, match=r"stem width 24.*none of the sizes"):
        LibreYOLO(str(_save(tmp_path / "dfine_m_coco.pth", wide)))
    deeper = dict(ref)
    for k in [k for k in ref if k.startswith("decoder.decoder.layers.2.")]:
        deeper[k.replace("layers.2.", "layers.3.")] = ref[k]
    with pytest.raises(CheckpointError, match=r"4 decoder layers"):
        LibreYOLO(str(_save(tmp_path / "dfine_n_4layers.pth", deeper)))


def test_not_a_release_file(tmp_path: Path) -> None:
    path = tmp_path / "other.pth"
    torch.save({"model": {"conv.weight": torch.zeros(1)}}, path)
    assert detect_format(path) != "dfine_release"

"""The Hub provider of ``ms_deform_attn``: loading, refusal rules and failure fallbacks, offline
(a local pure-PyTorch kernel folder stands in for the compiled CUDA kernel)."""

from __future__ import annotations

import importlib.machinery
import socket
import sys
import textwrap
import types
import warnings
from pathlib import Path

import pytest
import torch

from libreyolo.kernels import registry
from libreyolo.layers.msda import ms_deform_attn, ms_deform_attn_portable

OP = "ms_deform_attn"
KERNEL_SRC = textwrap.dedent(
    """
    import torch
    from libreyolo.layers.msda import ms_deform_attn_portable
    CALLS = []

    def _shapes(s):
        return [tuple(x) for x in s.tolist()]

    def ms_deform_attn_forward(value, spatial_shapes, level_start_index, loc, w, im2col_step):
        CALLS.append(("forward", im2col_step))
        return ms_deform_attn_portable(value, _shapes(spatial_shapes), loc, w)

    def ms_deform_attn_backward(value, spatial_shapes, level_start_index, loc, w, grad, step):
        CALLS.append(("backward", step))
        with torch.enable_grad():
            xs = [t.detach().requires_grad_() for t in (value, loc, w)]
            out = ms_deform_attn_portable(xs[0], _shapes(spatial_shapes), xs[1], xs[2])
            return list(torch.autograd.grad(out, xs, grad))
    """
)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    registry.resolve(OP)  # imports the providers (and triton) while TRITON_INTERPRET is set
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # only the Hub provider is eligible
    monkeypatch.setattr(registry, "_warned", set(), raising=False)  # fresh warn-once state
    registry.resolve(OP)  # imports the providers
    from libreyolo.kernels.attention import msda_hub

    pkg = tmp_path / "deformable-detr" / "build" / "torch-universal" / "deformable_detr"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(KERNEL_SRC)
    yield msda_hub, tmp_path / "deformable-detr"
    msda_hub.configure()
    registry.register(OP, msda_hub.ms_deform_attn_hub, name="hub", predicate=msda_hub.applies)


def _args(make_inputs, **kw):
    shapes, layout, value, loc, w = make_inputs(**kw)
    return shapes, (value, layout.spatial_shapes, layout.level_start_index, loc, w), layout


def test_local_kernel_folder_loads_and_runs_forward_backward(hub, make_inputs):
    msda_hub, folder = hub
    msda_hub.configure(
        loader=msda_hub.local_loader(folder), revision="a" * 40, devices=frozenset({"cpu"})
    )
    shapes, args, layout = _args(make_inputs, grad=True)
    assert registry.resolve_name(OP, *args) == "hub"
    out = ms_deform_attn(args[0], layout, args[3], args[4])
    out.sum().backward()
    calls = msda_hub.loaded().CALLS
    assert [c[0] for c in calls] == ["forward", "backward"] and calls[0][1] == 2  # im2col step
    ref = ms_deform_attn_portable(args[0].detach(), shapes, args[3].detach(), args[4].detach())
    torch.testing.assert_close(out.detach(), ref)
    assert args[0].grad is not None and args[3].grad is not None


def test_refusals(hub, make_inputs, monkeypatch):
    msda_hub, folder = hub
    msda_hub.configure(
        loader=msda_hub.local_loader(folder), revision="a" * 40, devices=frozenset({"cpu"})
    )
    _, args, _ = _args(make_inputs)
    assert msda_hub.applies(*args)
    for value in ("0", "false", "OFF", "no"):
        monkeypatch.setenv("LIBREYOLO_HUB_KERNELS", value)
        assert not msda_hub.applies(*args), value
    monkeypatch.delenv("LIBREYOLO_HUB_KERNELS")
    for probe in ("is_tracing", "is_compiling", "is_exporting", "is_onnx_exporting"):
        with monkeypatch.context() as m:
            m.setattr(f"libreyolo.kernels.context.{probe}", lambda: True)
            assert not msda_hub.applies(*args), probe
    v, s, st, loc, w = args
    assert not msda_hub.applies(v.half(), s, st, loc.half(), w.half())  # float32 only
    b, q, h, lv, p, _ = loc.shape
    assert not msda_hub.applies(
        v, s, st, loc.reshape(b, q, h, lv * p, 2), w.reshape(b, q, h, lv * p)
    )
    assert not msda_hub.applies(v, s, st, (loc * 4).long(), w)  # integer-index sampling
    msda_hub.configure(loader=msda_hub.local_loader(folder), revision="a" * 40)  # CUDA only
    assert not msda_hub.applies(*args)


def test_never_loads_inside_capture(hub, make_inputs, monkeypatch):
    msda_hub, _ = hub
    loads = []
    msda_hub.configure(
        loader=lambda r, v: loads.append(r), revision="a" * 40, devices=frozenset({"cpu"})
    )
    monkeypatch.setattr(msda_hub, "is_capturing", lambda: True)
    _, args, _ = _args(make_inputs)
    assert not msda_hub.applies(*args)
    assert loads == []


def test_without_package_no_import_no_network(hub, make_inputs, monkeypatch):
    msda_hub, _ = hub
    msda_hub.configure(revision="a" * 40, devices=frozenset({"cpu"}))  # default loader
    monkeypatch.setitem(sys.modules, "kernels", None)  # not installed

    attempts = []

    def no_socket(*a, **k):
        attempts.append(a)  # recorded: a provider may swallow the error below
        raise OSError("network access attempted")

    monkeypatch.setattr(socket, "socket", no_socket)
    monkeypatch.setattr(msda_hub, "default_loader", no_socket)
    shapes, args, layout = _args(make_inputs)
    assert registry.resolve_name(OP, *args) != "hub"
    out = ms_deform_attn(args[0], layout, args[3], args[4])
    torch.testing.assert_close(out, ms_deform_attn_portable(args[0], shapes, args[3], args[4]))
    assert attempts == []
    assert msda_hub.loaded() is None


def test_pin_is_the_audited_revision_and_unpinned_declines(hub, make_inputs, monkeypatch):
    msda_hub, folder = hub
    assert msda_hub.HUB_REPO == "kernels-community/deformable-detr"
    assert msda_hub.HUB_REVISION == "4d2393e5d7879f7cf68db04cc7c9c7342272bc05"  # SPEC A-5
    msda_hub.configure(loader=msda_hub.local_loader(folder), devices=frozenset({"cpu"}))
    _, args, _ = _args(make_inputs)
    assert msda_hub.revision() == msda_hub.HUB_REVISION
    monkeypatch.setattr(msda_hub, "HUB_REVISION", None)
    assert not msda_hub.applies(*args)
    assert msda_hub.loaded() is None
    assert (
        msda_hub.im2col_step(4) == 4
        and msda_hub.im2col_step(96) == 48
        and msda_hub.im2col_step(67) == 1
    )


def _fake_kernels(calls):
    """A stand-in for the ``kernels`` package: records which entry point the loader used."""
    mod = types.ModuleType("kernels")

    def get_kernel(repo_id, revision=None):
        calls.append(("get_kernel", repo_id, revision))
        return types.SimpleNamespace(ms_deform_attn_forward=len, ms_deform_attn_backward=len)

    def get_local_kernel(path, package_name):
        calls.append(("get_local_kernel", Path(path), package_name))
        return types.SimpleNamespace(ms_deform_attn_forward=len, ms_deform_attn_backward=len)

    mod.get_kernel, mod.get_local_kernel = get_kernel, get_local_kernel
    mod.__spec__ = importlib.machinery.ModuleSpec("kernels", None, origin="fake")
    return mod


@pytest.mark.parametrize(
    ("version", "path"),
    [("0.11.7", "sha"), ("0.13.0", "sha"), ("0.14.0", "snapshot"), ("0.16.2", "snapshot"),
     ("0.11.6", "refused"), ("0.17.0", "refused")],
)
def test_default_loader_resolves_the_pin_per_kernels_version(hub, monkeypatch, tmp_path, version, path):
    """SPEC A-5: the versions that resolve a commit SHA get it through ``get_kernel``; 0.14-0.16
    take the snapshot fallback (only this machine's build folder, then ``get_local_kernel``);
    versions outside the extra's range are refused. Offline: both entry points are fakes."""
    import huggingface_hub

    msda_hub, _ = hub
    calls, downloads = [], []
    monkeypatch.setitem(sys.modules, "kernels", _fake_kernels(calls))
    monkeypatch.setattr(msda_hub, "kernels_version", lambda: msda_hub._version_tuple(version))
    monkeypatch.setattr(msda_hub, "build_variant", lambda: "torch211-cxx11-cu130-x86_64-linux")

    def snapshot_download(repo_id, *, revision, allow_patterns):
        downloads.append((repo_id, revision, tuple(allow_patterns)))
        return str(tmp_path / "snap")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    pin = msda_hub.HUB_REVISION
    if path == "refused":
        with pytest.raises(RuntimeError, match="outside the supported range"):
            msda_hub.default_loader(msda_hub.HUB_REPO, pin)
        assert calls == [] and downloads == []
        return
    module = msda_hub.default_loader(msda_hub.HUB_REPO, pin)
    assert callable(module.ms_deform_attn_forward)
    if path == "sha":
        assert calls == [("get_kernel", msda_hub.HUB_REPO, pin)] and downloads == []
    else:
        assert downloads == [
            (msda_hub.HUB_REPO, pin, ("build/torch211-cxx11-cu130-x86_64-linux/*",))
        ]
        assert calls == [("get_local_kernel", tmp_path / "snap", "deformable_detr")]


def test_sha_rejected_by_a_version_in_range_takes_the_snapshot(hub, monkeypatch, tmp_path):
    import huggingface_hub

    msda_hub, _ = hub
    calls, downloads = [], []
    fake = _fake_kernels(calls)

    class RevisionNotFoundError(Exception):
        pass

    def rejecting(repo_id, revision=None):
        calls.append(("get_kernel", repo_id, revision))
        raise RevisionNotFoundError(f"Invalid rev id: {revision}")

    fake.get_kernel = rejecting
    monkeypatch.setitem(sys.modules, "kernels", fake)
    monkeypatch.setattr(msda_hub, "kernels_version", lambda: (0, 13, 1))
    monkeypatch.setattr(msda_hub, "build_variant", lambda: "torch27-cxx11-cu128-x86_64-linux")
    monkeypatch.setattr(
        huggingface_hub,
        "snapshot_download",
        lambda repo_id, *, revision, allow_patterns: downloads.append(revision) or str(tmp_path),
    )
    module = msda_hub.default_loader(msda_hub.HUB_REPO, msda_hub.HUB_REVISION)
    assert callable(module.ms_deform_attn_forward)
    assert [c[0] for c in calls] == ["get_kernel", "get_local_kernel"]
    assert downloads == [msda_hub.HUB_REVISION]
    fake.get_kernel = lambda repo_id, revision=None: (_ for _ in ()).throw(OSError("offline"))
    with pytest.raises(OSError, match="offline"):  # any other failure is not masked
        msda_hub.default_loader(msda_hub.HUB_REPO, msda_hub.HUB_REVISION)


def test_build_variant_names_the_machine(monkeypatch):
    from libreyolo.kernels.attention import msda_hub

    monkeypatch.setattr(torch, "__version__", "2.7.1+cu128")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(msda_hub.platform, "machine", lambda: "x86_64")
    assert msda_hub.build_variant() == "torch27-cxx11-cu128-x86_64-linux"
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(RuntimeError, match="no CUDA"):
        msda_hub.build_variant()
    assert msda_hub._version_tuple("0.13.0rc1") == (0, 13, 0)


def test_pyproject_extra_matches_the_supported_range():
    text = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text()
    from libreyolo.kernels.attention import msda_hub

    lo, hi = msda_hub.KERNELS_SHA_REVISION[0], msda_hub.KERNELS_SNAPSHOT[1]
    want = f'hub-kernels = ["kernels>={".".join(map(str, lo))},<{hi[0]}.{hi[1]}"]'
    assert want in text


def test_load_failure_disables_with_one_warning(hub, make_inputs):
    msda_hub, _ = hub

    def broken(repo, rev):
        raise OSError("offline")

    msda_hub.configure(loader=broken, revision="a" * 40, devices=frozenset({"cpu"}))
    shapes, args, layout = _args(make_inputs)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in range(3):
            out = ms_deform_attn(args[0], layout, args[3], args[4])
            registry.clear_cache()
    assert len([w for w in rec if "disabled" in str(w.message)]) == 1
    torch.testing.assert_close(out, ms_deform_attn_portable(args[0], shapes, args[3], args[4]))
    assert registry.resolve_name(OP, *args) != "hub"


def test_run_failure_disables_and_falls_back(hub, make_inputs, tmp_path):
    msda_hub, folder = hub
    init = folder / "build" / "torch-universal" / "deformable_detr" / "__init__.py"
    init.write_text(
        KERNEL_SRC.replace(
            'CALLS.append(("forward", im2col_step))', 'raise RuntimeError("bad kernel")'
        )
    )
    msda_hub.configure(
        loader=msda_hub.local_loader(folder), revision="a" * 40, devices=frozenset({"cpu"})
    )
    shapes, args, layout = _args(make_inputs)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out1 = ms_deform_attn(args[0], layout, args[3], args[4])
        out2 = ms_deform_attn(args[0], layout, args[3], args[4])
    assert len([w for w in rec if "disabled" in str(w.message)]) == 1
    ref = ms_deform_attn_portable(args[0], shapes, args[3], args[4])
    torch.testing.assert_close(out1, ref)
    torch.testing.assert_close(out2, ref)
    assert registry.resolve_name(OP, *args) != "hub"


def test_backward_failure_disables_and_gives_portable_gradients(hub, make_inputs):
    msda_hub, folder = hub
    init = folder / "build" / "torch-universal" / "deformable_detr" / "__init__.py"
    init.write_text(
        KERNEL_SRC.replace('CALLS.append(("backward", step))', 'raise RuntimeError("bad bwd")')
    )
    msda_hub.configure(
        loader=msda_hub.local_loader(folder), revision="a" * 40, devices=frozenset({"cpu"})
    )
    shapes, args, layout = _args(make_inputs, grad=True)
    assert registry.resolve_name(OP, *args) == "hub"
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = ms_deform_attn(args[0], layout, args[3], args[4])
        got = torch.autograd.grad(out.sum(), (args[0], args[3], args[4]))
    assert len([w for w in rec if "disabled" in str(w.message)]) == 1
    ref = ms_deform_attn_portable(args[0], shapes, args[3], args[4])
    want = torch.autograd.grad(ref.sum(), (args[0], args[3], args[4]))
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r)
    assert registry.resolve_name(OP, *args) != "hub"


def test_hub_is_tried_before_triton(hub, make_inputs, monkeypatch):
    import triton
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(triton.language.zeros, InterpretedFunction):
        pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported (CPU Triton)")
    msda_hub, folder = hub
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    msda_hub.configure(
        loader=msda_hub.local_loader(folder), revision="a" * 40, devices=frozenset({"cpu"})
    )
    _, args, _ = _args(make_inputs)
    assert registry.resolve_name(OP, *args) == "hub"  # registered last = newest = first
    names = registry.implementations(OP)
    assert names.index("hub") < names.index("triton")
    monkeypatch.setenv("LIBREYOLO_HUB_KERNELS", "off")
    monkeypatch.setenv("LIBREYOLO_KERNELS", "triton")  # CPU tensors take the interpreter only when asked for
    registry.clear_cache()
    assert registry.resolve_name(OP, *args) == "triton"


def test_local_folder_loads_beside_a_kernels_release_outside_the_range(hub, make_inputs, monkeypatch):
    """transformers 5.25 installs ``kernels`` 0.19, whose ``get_local_kernel`` takes the folder
    only: the local loader imports the folder itself there, and the Hub loader declines that
    release with the range in its message (nothing is fetched)."""
    msda_hub, folder = hub
    fake = types.ModuleType("kernels")

    def get_local_kernel(repo_path, *, backend=None):  # the 0.19 signature
        raise AssertionError("a release outside the range must not be used")

    fake.get_local_kernel = get_local_kernel
    monkeypatch.setitem(sys.modules, "kernels", fake)
    monkeypatch.setattr(msda_hub, "_kernels_installed", lambda: True)
    monkeypatch.setattr(msda_hub, "kernels_version", lambda: (0, 19, 1))
    msda_hub.configure(loader=msda_hub.local_loader(folder), revision="a" * 40, devices=frozenset({"cpu"}))
    _, args, layout = _args(make_inputs)
    assert registry.resolve_name(OP, *args) == "hub"
    ms_deform_attn(args[0], layout, args[3], args[4])
    assert [c[0] for c in msda_hub.loaded().CALLS] == ["forward"]
    with pytest.raises(RuntimeError, match="outside the supported range"):
        msda_hub.default_loader(msda_hub.HUB_REPO, "a" * 40)

#!/usr/bin/env python3
"""Put mmdetection's RTMDet / RTMDet-Ins reference into a folder, for CI's references step.

mmdetection 3.3.0 needs mmcv < 2.2.0, which is published for this torch only as a source package
whose build fails (and would compile its ops against the installed torch). The RTMDet fidelity tests
(``tests/unit/convert/test_rtmdet_mmdet.py``, ``test_rtmdet_ins_mmdet.py``) need none of those ops,
so this script builds a copy that imports without them:

1. the pinned wheels below, installed with ``pip install --no-deps --upgrade --target DIR``;
2. mmcv's source distribution (``pip download --no-binary :all:``, its SHA-256 checked), of which
   only the pure-Python package ``mmcv/`` is copied into ``DIR``, without ``mmcv/ops``;
3. a stub ``mmcv/ops`` written here: the names mmdetection imports at module level, each a class
   that raises ``RuntimeError`` when called or instantiated (mmdetection's NMS among them: the
   tests that reach it patch it with torchvision's);
4. an import check in a fresh interpreter: mmcv, mmengine and mmdetection come from ``DIR``,
   ``mmcv.ops`` is the stub, and mmdetection registers all its modules (RTMDet's among them).

Any failing step stops the script with a non-zero exit. Running it again replaces what it wrote
(``--upgrade``, ``mmcv/`` removed first), so it is idempotent; other packages in ``DIR`` are left
alone. Standard library only; it runs pip as ``sys.executable -m pip``, so call it with the
environment's interpreter::

    .venv/bin/python .ci/mmdet_refs.py .ci-refs
    PYTHONPATH=".:.ci-refs" .venv/bin/python -m pytest tests/unit/convert/test_rtmdet_mmdet.py
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from pathlib import Path, PurePosixPath

# not in the main environment (torch, numpy, scipy, matplotlib, opencv, pillow, pyyaml, rich, tqdm,
# packaging and platformdirs are, and are used from there)
WHEELS = (
    "mmdet==3.3.0",
    "mmengine==0.10.7",  # 0.10.4 registers torch>=2.5's Adafactor and then transformers' (KeyError)
    "pycocotools==2.0.11",
    "addict==2.4.0",
    "yapf==0.43.0",
    "termcolor==3.3.0",
    "terminaltables==3.1.10",
    "six==1.17.0",
    "shapely==2.1.2",
)
MMCV_VERSION = "2.1.0"
MMCV_SDIST_SHA256 = "d387bcab66b467479b6660310e23746cfc79c6e57acf04094680adb499a5cd3f"
# pip prepares the sdist's metadata even for a download: mmcv's setup.py imports pkg_resources,
# which setuptools >= 81 no longer ships, so an older setuptools runs it (a temporary folder)
BUILD_HELPERS = ("setuptools==69.5.1", "wheel==0.43.0")

# what mmdetection 3.3.0 imports from mmcv.ops at module level (register_all_modules imports all
# of it), by module; the first entry is the package itself
STUB = {
    "": ("CARAFEPack", "ConcatCell", "CornerPool", "DeformConv2d", "GlobalPoolingCell",
         "MaskedConv2d", "ModulatedDeformConv2d", "MultiScaleDeformableAttention", "RoIPool",
         "SumCell", "batched_nms", "deform_conv2d", "nms", "nms_match", "point_sample",
         "rel_roi_point_to_rel_img_point", "roi_align", "sigmoid_focal_loss"),
    "carafe": ("CARAFEPack",),
    "merge_cells": ("ConcatCell", "GlobalPoolingCell", "SumCell"),
    "modulated_deform_conv": ("ModulatedDeformConv2d",),
    "multi_scale_deform_attn": ("MultiScaleDeformableAttention",),
    "nms": ("batched_nms", "nms"),
    "roi_align": ("roi_align",),
}

STUB_INIT = '''\
"""mmcv.ops as a name-only stub, written by libreyolo's .ci/mmdet_refs.py: mmcv's compiled ops
are not installed. Only the names mmdetection 3.3.0 imports at module level exist; calling or
instantiating any of them raises RuntimeError. Any other name fails at import, as usual."""

__all__ = {names!r}


class _CompiledOp:
    """Stands for a compiled mmcv op: a class, so isinstance checks and subclasses work."""

    def __new__(cls, *args, **kwargs):
        raise RuntimeError(
            f"mmcv.ops.{{cls.__name__}} is a name-only stub (libreyolo .ci/mmdet_refs.py): "
            "mmcv's compiled ops are not installed, so it cannot run; patch it in the test")


def _stub(name):
    return type(name, (_CompiledOp,), {{"__module__": __name__, "__qualname__": name}})


for _name in __all__:
    globals()[_name] = _stub(_name)
del _name
'''

STUB_SUBMODULE = '''\
"""Part of the mmcv.ops stub (libreyolo .ci/mmdet_refs.py): re-exports names of the package."""

from mmcv.ops import {names}  # noqa: F401
'''

CHECK = textwrap.dedent('''\
    import sys
    from pathlib import Path

    import mmcv, mmcv.ops, mmdet, mmengine
    target = Path(sys.argv[1]).resolve()
    for mod in (mmcv, mmdet, mmengine):
        assert Path(mod.__file__).resolve().is_relative_to(target), (mod.__name__, mod.__file__)
    assert mmcv.__version__ == sys.argv[2], mmcv.__version__
    assert "name-only stub" in mmcv.ops.__doc__
    try:
        mmcv.ops.batched_nms(None, None, None, None)
    except RuntimeError as e:
        assert "compiled ops are not installed" in str(e)
    else:
        raise AssertionError("the mmcv.ops stub ran")
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    register_all_modules()
    for name in ("RTMDet", "CSPNeXt", "CSPNeXtPAFPN", "RTMDetSepBNHead", "RTMDetInsSepBNHead"):
        assert MODELS.get(name) is not None, name
    print("mmdet", mmdet.__version__, "mmengine", mmengine.__version__, "mmcv", mmcv.__version__,
          "(ops stubbed) import from", target)
''')


def _run(cmd: list[str], env: dict[str, str] | None = None, what: str = "") -> None:
    print("+", what or " ".join(cmd), flush=True)
    try:
        subprocess.run(cmd, check=True, env=env)
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"mmdet_refs: failed (exit {e.returncode}): {what or ' '.join(cmd)}") from None


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    _run([sys.executable, "-m", "pip", *args], env=env)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


def install_wheels(target: Path) -> None:
    """Step 1: the pinned wheels, without their dependencies (an existing copy is replaced, and
    the metadata of another version of one of them, which pip would leave, removed)."""
    for pin in WHEELS:
        name, version = pin.split("==")
        stem = name.replace("-", "_")
        for meta in target.glob("*.dist-info"):
            meta_name, _, meta_version = meta.name[: -len(".dist-info")].partition("-")
            if meta_name.lower() == stem.lower() and meta_version != version:
                shutil.rmtree(meta)
    _pip("install", "-q", "--no-deps", "--upgrade", "--only-binary", ":all:", "--target",
         str(target), *WHEELS, env=_env())


def download_mmcv(work: Path) -> Path:
    """Step 2a: mmcv's source distribution into ``work``; returns its path (SHA-256 checked)."""
    helpers, dl = work / "build-helpers", work / "download"
    _pip("install", "-q", "--no-deps", "--only-binary", ":all:", "--target", str(helpers),
         *BUILD_HELPERS, env=_env())
    # no build isolation: pip runs the sdist's setup.py (metadata only, nothing compiles) with the
    # helpers' setuptools first on the path
    _pip("download", "-q", "--no-deps", "--no-binary", ":all:", "--no-build-isolation", "-d",
         str(dl), f"mmcv=={MMCV_VERSION}", env=_env(PYTHONPATH=str(helpers)))
    sdist = dl / f"mmcv-{MMCV_VERSION}.tar.gz"
    if not sdist.is_file():
        raise SystemExit(f"pip download gave {sorted(p.name for p in dl.iterdir())}, not {sdist.name}")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != MMCV_SDIST_SHA256:
        raise SystemExit(f"{sdist.name}: sha256 {digest}, expected {MMCV_SDIST_SHA256}")
    return sdist


def copy_mmcv_python(sdist: Path, target: Path) -> int:
    """Step 2b: the sdist's ``mmcv/`` package without ``mmcv/ops`` into ``target``; returns the
    number of files written."""
    top = PurePosixPath(f"mmcv-{MMCV_VERSION}", "mmcv")
    dest = target / "mmcv"
    if dest.exists():
        shutil.rmtree(dest)
    written = 0
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar.getmembers():
            path = PurePosixPath(member.name)
            if not member.isfile() or top not in path.parents:
                continue
            rel = path.relative_to(top)
            if rel.parts[0] == "ops" or ".." in rel.parts:
                continue
            out = dest.joinpath(*rel.parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            assert src is not None, member.name
            out.write_bytes(src.read())
            written += 1
    if not (dest / "__init__.py").is_file() or not (dest / "cnn" / "__init__.py").is_file():
        raise SystemExit(f"{sdist.name} has no mmcv package under {top}")
    version = (dest / "version.py").read_text()
    if f"__version__ = '{MMCV_VERSION}'" not in version:
        raise SystemExit(f"{dest / 'version.py'} does not say {MMCV_VERSION}")
    return written


def write_ops_stub(target: Path) -> None:
    """Step 3: ``mmcv/ops`` as a stub package with the names in ``STUB``."""
    ops = target / "mmcv" / "ops"
    ops.mkdir()
    for module, names in STUB.items():
        if module:
            missing = set(names) - set(STUB[""])
            assert not missing, (module, missing)  # a submodule only re-exports the package's names
            text = STUB_SUBMODULE.format(names=", ".join(names))
        else:
            text = STUB_INIT.format(names=list(names))
        (ops / f"{module or '__init__'}.py").write_text(text)


def check(target: Path) -> None:
    """Step 4: mmdetection imports from ``target`` with the stub and RTMDet's modules register."""
    _run([sys.executable, "-c", CHECK, str(target), MMCV_VERSION],
         env=_env(PYTHONPATH=str(target)), what=f"import check (PYTHONPATH={target})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path, help="the folder to install into (created if absent)")
    target = parser.parse_args(argv).target.resolve()
    start = time.perf_counter()
    target.mkdir(parents=True, exist_ok=True)
    install_wheels(target)
    with tempfile.TemporaryDirectory(prefix="mmdet-refs-") as tmp:
        files = copy_mmcv_python(download_mmcv(Path(tmp)), target)
    write_ops_stub(target)
    print(f"mmcv {MMCV_VERSION}: {files} files of its Python package, mmcv/ops stubbed", flush=True)
    check(target)
    print(f"done in {time.perf_counter() - start:.0f} s: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

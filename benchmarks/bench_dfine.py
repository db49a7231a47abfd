"""D-FINE / DEIM on a GPU: the RT-DETR benchmark (``bench_rtdetr.py``) run on these families.

Same grid and outputs as ``bench_rtdetr.py`` (prediction and training-step timing with and
without capture per batch and ``ms_deform_attn`` provider, the captured share of a step, and the
fp32 step-zero training parity of the seam split next to two seeded eager runs); only the model
lists default to D-FINE / DEIM. The models run in fp32 by default, as the reference trains them
(``--dtypes float32``); pass ``--dtypes float32,float16`` for the AMP rows.

D-FINE decoders sample with per-level point counts ((6, 6) for n, (3, 6, 3) for s), so their
``ms_deform_attn`` calls take the mixed-points layout, which always runs the portable path;
the provider column then records that path.

    python benchmarks/bench_dfine.py --out benchmarks/results/dfine
    python benchmarks/bench_dfine.py --out /tmp/d --models dfine:n --batches 2 --iters 10 --parity-models dfine:n
    python benchmarks/bench_dfine.py --out benchmarks/results/deimv2 --models deimv2:atto,deimv2:n,rtdetrv4:s \
        --parity-models deimv2:atto,rtdetrv4:s
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_rtdetr  # noqa: E402

DEFAULTS = {"--models": "dfine:n,deim:n", "--parity-models": "dfine:n,dfine:s,deim:n,deim:s",
            "--dtypes": "float32", "--providers": "off"}


def families() -> dict[str, type]:
    """The RT-DETR families plus D-FINE, DEIM, DEIMv2 and RT-DETRv4 (registered idempotently)."""
    from libreyolo.models.deim.family import DEIM
    from libreyolo.models.deimv2.family import DEIMv2
    from libreyolo.models.dfine.family import DFINE
    from libreyolo.models.rtdetrv4.family import RTDETRv4
    from libreyolo.registry import register_family

    fams = dict(_rtdetr_families())
    for fam in (DFINE, DEIM, DEIMv2, RTDETRv4):
        register_family(fam)
        fams[fam.FAMILY] = fam
    return fams


_rtdetr_families = bench_rtdetr._families


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    for flag, value in DEFAULTS.items():
        if flag not in given:
            args += [flag, value]
    bench_rtdetr._families = families
    return bench_rtdetr.main(args)


if __name__ == "__main__":
    raise SystemExit(main())

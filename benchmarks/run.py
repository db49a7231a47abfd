"""The one benchmark runner: runs entries of ``benchmarks/manifest.yaml`` with their time limits.

    python3 benchmarks/run.py --list                                   # entries, machines, commands
    python3 benchmarks/run.py bench_loss 'parity_train_*' --out /tmp/res
    python3 benchmarks/run.py 'parity_*' --owed --machine nvidia-h200 --budget-s 540 --out /tmp/res
    python3 benchmarks/run.py 'gpu_tests_ddp' bench_ddp 'bench_train*' --gpus 0,1 \\
        --commit <sha> --pack-to $OUT/results.tgz                      # two-GPU machine, one lane per GPU
    python3 benchmarks/run.py 'parity_*' --owed --gpus 0,0,0,0 --budget-s 540 --clamp 60 \\
        --out /tmp/res                 # four lanes on one GPU (correctness only), cut at the budget's end

Entries run in the order given (globs expand in manifest order), each under its ``timeout_s``
(stopped with its process group; rc 124 as with ``timeout``), output to ``DIR/<name>.log``; after
every entry ``DIR/summary.json`` lists each one's rc and seconds. ``--gpus 0,1``: entries with
``gpus: 2`` run first, alone, on every listed GPU; the others share one queue with one lane per
GPU (``CUDA_VISIBLE_DEVICES`` pinned). Commands write their results into the working tree
(``--out benchmarks/results/...``, ``--out docs``).

Set-up (what a GPU session needs): wheels carried in ``.whl/`` are installed into ``/tmp/site``
(``pip --target``, no index, no deps) and put first on ``PYTHONPATH``, the repository root after
them; ``LIBREYOLO_COMMIT`` is ``--commit`` (else ``$LIBREYOLO_COMMIT``, ``$COMMIT``, git's HEAD),
so results name the commit where the tree has no ``.git``; ``nvidia-smi`` and the torch / CUDA /
triton versions go to ``DIR/nvidia-smi.txt`` and ``DIR/env.txt``. ``--pack-to FILE.tgz`` packs the
log folder and every run entry's ``--out`` folder (no checkpoints, run folders, datasets or
images); over 15 MB it keeps only json / md / log / txt files under 2 MB. An entry's ``artifacts``
(e.g. the demo checkpoint) are copied beside the archive.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "benchmarks" / "manifest.yaml"
SITE = Path("/tmp/site")
PACK_LIMIT = 15_000_000
PACK_EXCLUDE_DIRS = {"runs", "data", "labels", "__pycache__"}
PACK_EXCLUDE_SUFFIXES = (".pt", ".cache", ".jpg", ".png")
PACK_FALLBACK_SUFFIXES = (".json", ".md", ".log", ".txt")
ENV_PROBE = ("import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__, "
             "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')")


def load_manifest(path: Path = MANIFEST) -> dict[str, Any]:
    """The manifest as a dict: ``entries`` (name -> entry), ``pending``, ``scripts_without_results``."""
    import yaml

    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
        raise ValueError(f"{path}: expected a mapping with an 'entries' mapping")
    return doc


def select(entries: dict[str, Any], patterns: list[str], *, machine: str | None = None,
           owed: bool = False) -> list[str]:
    """Entry names matching ``patterns`` (names or globs), in the order given, each once; ``owed``:
    only those with no committed results yet (``results: []``), the runs a GPU session still owes."""
    names: list[str] = []
    for pat in patterns or ["*"]:
        hits = [n for n in entries if fnmatch.fnmatchcase(n, pat)]
        if not hits:
            raise SystemExit(f"run.py: no manifest entry matches {pat!r} (see --list)")
        names += [n for n in hits if n not in names]
    return [n for n in names if (machine is None or entries[n].get("machine") == machine)
            and not (owed and entries[n].get("results"))]


class Budget:
    """An overall wall-clock budget (seconds; None: unlimited): an entry starts only if its own
    ``timeout_s`` still fits, so a session's call returns, with its summary, before the machine's
    limit cuts it off. Entries that do not fit are recorded as skipped, not run."""

    def __init__(self, seconds: float | None, *, clamp_min_s: float | None = None) -> None:
        self.seconds, self.t0, self.clamp_min_s = seconds, time.monotonic(), clamp_min_s

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - (time.monotonic() - self.t0)

    def fits(self, entry: dict[str, Any]) -> bool:
        need = float(entry.get("timeout_s") or 0)
        if self.clamp_min_s is not None:  # --clamp: start with at least this much left, cut at the budget's end
            need = min(need, self.clamp_min_s)
        return need <= self.left()

    def limit(self, entry: dict[str, Any]) -> float | None:
        """The time limit an entry runs under: its ``timeout_s``, with --clamp no later than the budget's end."""
        own = entry.get("timeout_s")
        if self.clamp_min_s is None or self.seconds is None:
            return own
        return min(float(own), self.left()) if own else self.left()


def out_folder(command: str) -> Path | None:
    """The folder a command writes to (its ``--out`` value), relative to the repository root."""
    argv = shlex.split(command)
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if a.startswith("--out="):
            return Path(a.split("=", 1)[1])
    return None


def resolve_commit(given: str | None) -> str:
    for value in (given, os.environ.get("LIBREYOLO_COMMIT"), os.environ.get("COMMIT")):
        if value:
            return value
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def prepare_env(log_dir: Path, commit: str, *, wheels: bool = True) -> dict[str, str]:
    """The environment every command runs with; installs carried wheels first (unless ``wheels`` is False)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LIBREYOLO_COMMIT": commit, "NCCL_NVLS_ENABLE": "0"}
    paths = [str(ROOT)]
    carried = sorted((ROOT / ".whl").glob("*.whl")) if wheels else []
    if carried:
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                            "--no-cache-dir", "--upgrade", "--target", str(SITE), *map(str, carried)])
        if p.returncode != 0:
            raise SystemExit(f"run.py: installing the carried wheels of .whl/ into {SITE} failed (pip exit "
                             f"{p.returncode}, see above); --no-wheels runs without them")
        paths.insert(0, str(SITE))
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    for name, argv in (("nvidia-smi.txt", ["nvidia-smi"]), ("env.txt", [sys.executable, "-c", ENV_PROBE])):
        try:
            p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
            (log_dir / name).write_text(p.stdout + p.stderr)
        except (OSError, subprocess.SubprocessError) as e:
            (log_dir / name).write_text(f"{argv[0]}: {e}\n")
    return env


def run_entry(name: str, entry: dict[str, Any], *, log_dir: Path, env: dict[str, str],
              cuda_devices: str | None, limit_s: float | None = None) -> dict[str, Any]:
    """Run one entry's command under its time limit (``limit_s``, default its ``timeout_s``);
    returns its summary record."""
    limit = entry.get("timeout_s") if limit_s is None else limit_s
    rec: dict[str, Any] = {"name": name, "command": entry["command"], "timeout_s": entry.get("timeout_s"),
                           "log": f"{name}.log", "cuda_visible_devices": cuda_devices}
    if limit != entry.get("timeout_s"):
        rec["limit_s"] = round(float(limit), 1)
    script = ROOT / entry["script"]
    if not script.exists():
        return {**rec, "rc": None, "seconds": 0.0, "error": f"{entry['script']} does not exist (pending?)"}
    argv = shlex.split(entry["command"])
    if argv[0] == "python3":
        argv[0] = sys.executable
    run_env = dict(env, **{str(k): str(v) for k, v in (entry.get("env") or {}).items()})
    if cuda_devices is not None:
        run_env["CUDA_VISIBLE_DEVICES"] = cuda_devices
    t0 = time.monotonic()
    with open(log_dir / f"{name}.log", "w") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=run_env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out, rc = True, 124
            _stop(proc)
        except BaseException:
            _stop(proc)
            raise
    return {**rec, "rc": rc, "timed_out": timed_out, "seconds": round(time.monotonic() - t0, 1)}


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the command's process group, SIGKILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


class Summary:
    """DIR/summary.json, rewritten after every entry (partial results survive a crash)."""

    def __init__(self, path: Path, *, commit: str, names: list[str]) -> None:
        self.path, self.lock = path, threading.Lock()
        self.doc: dict[str, Any] = {"commit": commit, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                    "selected": names, "entries": []}
        self._write()

    def add(self, rec: dict[str, Any]) -> None:
        with self.lock:
            self.doc["entries"].append(rec)
            self._write()
        print(f"rc={rec['rc']} {rec['name']} {rec['seconds']}s" + (" TIMED OUT" if rec.get("timed_out") else "")
              + (f" ({rec['error']})" if rec.get("error") else ""), flush=True)

    def _write(self) -> None:
        self.path.write_text(json.dumps(self.doc, indent=2) + "\n")


def _skipped(name: str, entry: dict[str, Any], budget: Budget) -> dict[str, Any]:
    return {"name": name, "command": entry["command"], "timeout_s": entry.get("timeout_s"), "rc": None,
            "seconds": 0.0, "skipped": True,
            "error": f"not started: its {entry.get('timeout_s')} s limit does not fit the {budget.left():.0f} s "
                     f"left of the {budget.seconds:.0f} s budget"}


def run_all(names: list[str], entries: dict[str, Any], *, log_dir: Path, env: dict[str, str],
            gpus: list[str] | None, summary: Summary, budget: Budget | None = None) -> None:
    budget = budget or Budget(None)

    def one(n: str, devices: str | None) -> None:
        if not budget.fits(entries[n]):
            summary.add(_skipped(n, entries[n], budget))
            return
        summary.add(run_entry(n, entries[n], log_dir=log_dir, env=env, cuda_devices=devices,
                              limit_s=budget.limit(entries[n])))

    if not gpus:
        for n in names:
            one(n, None)
        return
    wide = [n for n in names if int(entries[n].get("gpus", 1)) > 1]
    for n in wide:  # every GPU, alone
        one(n, ",".join(gpus))
    queue: SimpleQueue[str] = SimpleQueue()
    for n in names:
        if n not in wide:
            queue.put(n)

    def lane(gpu: str) -> None:
        while True:
            try:
                n = queue.get_nowait()
            except Empty:
                return
            one(n, gpu)

    threads = [threading.Thread(target=lane, args=(g,), name=f"lane-{g}") for g in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _packable(rel: Path, full: Path, *, fallback: bool) -> bool:
    if any(part in PACK_EXCLUDE_DIRS for part in rel.parts):
        return False
    if fallback:
        return rel.suffix in PACK_FALLBACK_SUFFIXES and full.stat().st_size < 2_000_000
    return not rel.name.endswith(PACK_EXCLUDE_SUFFIXES)


def pack(target: Path, *, log_dir: Path, folders: list[Path]) -> Path:
    """Pack the logs (as ``runner/``) and the results folders (paths relative to the repository
    root, so the archive unpacks onto the tree); falls back to small text files over 15 MB."""
    target.parent.mkdir(parents=True, exist_ok=True)
    sources = [(log_dir, Path("runner"))] + [(ROOT / f, f) for f in folders if (ROOT / f).is_dir()]
    for fallback in (False, True):
        with tarfile.open(target, "w:gz") as tar:
            for src, arc in sources:
                for f in sorted(p for p in src.rglob("*") if p.is_file()):
                    rel = f.relative_to(src)
                    if _packable(rel, f, fallback=fallback) and f.resolve() != target.resolve():
                        tar.add(f, arcname=str(arc / rel))
        size = target.stat().st_size
        print(f"packed {target} ({size} bytes{', json/md/log/txt only' if fallback else ''})", flush=True)
        if size <= PACK_LIMIT:
            break
    return target


def list_entries(entries: dict[str, Any], names: list[str]) -> None:
    for n in names:
        e = entries[n]
        res = e.get("results") or []
        print(f"{n:<28} {e.get('machine', '?'):<15} gpus={e.get('gpus', 1)} {e.get('timeout_s', '-'):>4}s "
              f"schema={e.get('schema')} results={len(res) or 'not yet run'}\n    {e['command']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="entry names or globs (default: every entry)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/res"), help="folder for <name>.log and summary.json")
    ap.add_argument("--list", action="store_true", help="list the selected entries and exit")
    ap.add_argument("--dry-run", action="store_true", help="print what would run and exit")
    ap.add_argument("--machine", default=None, help="keep only entries of this machine kind")
    ap.add_argument("--owed", action="store_true", help="keep only entries without committed results (results: [])")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="overall seconds: start an entry only while its timeout_s still fits")
    ap.add_argument("--clamp", type=float, default=None, metavar="MIN_S",
                    help="with --budget-s: start an entry while MIN_S (or its timeout_s, if less) is left "
                         "and stop it at the budget's end (recorded as timed out)")
    ap.add_argument("--gpus", default=None, help="comma list of GPU ids: one lane per GPU (a repeated id: "
                    "several lanes share that GPU; for correctness runs only, never timings)")
    ap.add_argument("--commit", default=None, help="commit recorded in the results (default: see above)")
    ap.add_argument("--no-wheels", action="store_true", help="do not install the carried wheels of .whl/")
    ap.add_argument("--pack-to", type=Path, default=None, help="afterwards, pack logs and results into this .tgz")
    ap.add_argument("--manifest", type=Path, default=MANIFEST, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    entries = load_manifest(args.manifest)["entries"]
    names = select(entries, args.names, machine=args.machine, owed=args.owed)
    if args.list or args.dry_run:
        list_entries(entries, names)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    commit = resolve_commit(args.commit)
    env = prepare_env(args.out, commit, wheels=not args.no_wheels)
    summary = Summary(args.out / "summary.json", commit=commit, names=names)
    gpus = [g for g in (args.gpus or "").split(",") if g]
    try:
        run_all(names, entries, log_dir=args.out, env=env, gpus=gpus or None, summary=summary,
                budget=Budget(args.budget_s, clamp_min_s=args.clamp))
    finally:
        if args.pack_to is not None:
            folders = sorted({f for f in (out_folder(entries[n]["command"]) for n in names) if f is not None})
            pack(args.pack_to, log_dir=args.out, folders=folders)
            for n in names:
                for art in entries[n].get("artifacts") or []:
                    if (ROOT / art).is_file():
                        shutil.copy2(ROOT / art, args.pack_to.parent / Path(art).name)
    failed = [r["name"] for r in summary.doc["entries"] if r["rc"] != 0 and not r.get("skipped")]
    skipped = [r["name"] for r in summary.doc["entries"] if r.get("skipped")]
    if skipped:
        print(f"{len(skipped)} entries not started (budget): {', '.join(skipped)}", flush=True)
    print(f"{len(summary.doc['entries']) - len(failed) - len(skipped)}/{len(names)} entries ok"
          + (f"; not ok: {', '.join(failed)}" if failed else ""), flush=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())

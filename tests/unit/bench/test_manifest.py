"""benchmarks/manifest.yaml matches the tree: every committed result file is listed with the
command that wrote it, every listed script exists (or is pending, with a reason), every benchmark
script is listed, and every results JSON the manifest marks as schema 1 validates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks._common import validate_result
from benchmarks.run import load_manifest

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "benchmarks" / "results"
NOT_SCRIPTS = {"__init__.py", "_common.py", "run.py"}
SCHEMAS = {0, 1, "matrix", "log"}
RESULT_SUFFIXES = (".json", ".md", ".csv", ".log", ".txt")  # every kind committed under results/

MANIFEST = load_manifest()
ENTRIES: dict = MANIFEST["entries"]
PENDING: dict = MANIFEST.get("pending") or {}
WITHOUT: dict = MANIFEST.get("scripts_without_results") or {}


def _listed() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, e in ENTRIES.items():
        for path in e.get("results") or []:
            out.setdefault(path, []).append(name)
    return out


def test_every_committed_result_file_is_listed():
    listed = _listed()
    files = sorted(p.relative_to(ROOT).as_posix() for p in RESULTS.rglob("*")
                   if p.is_file() and p.suffix in RESULT_SUFFIXES)
    assert any(f.endswith(".json") for f in files), "benchmarks/results/ holds no json file: wrong root?"
    missing = [f for f in files if f not in listed]
    assert not missing, (f"results without a manifest entry: {missing}; add them to an entry's `results` in "
                         "benchmarks/manifest.yaml with the command that wrote them")


def test_every_listed_result_file_exists():
    gone = sorted(p for p in _listed() if not (ROOT / p).is_file())
    assert not gone, f"manifest lists files that are not in the tree: {gone}"


def test_every_entry_script_exists_or_is_pending():
    missing = {n: e["script"] for n, e in ENTRIES.items()
               if not (ROOT / e["script"]).exists() and e["script"] not in PENDING}
    assert not missing, f"entries whose script does not exist (and is not in `pending`): {missing}"


def test_pending_and_unlisted_scripts_carry_a_reason():
    for table in (PENDING, WITHOUT):
        for script, reason in table.items():
            assert isinstance(reason, str) and reason.strip(), f"{script}: needs a one-line reason"
    stale = [s for s in PENDING if not any(e["script"] == s for e in ENTRIES.values())]
    assert not stale, f"pending scripts without an entry: {stale}"


def test_every_benchmark_script_is_in_the_manifest():
    used = {e["script"] for e in ENTRIES.values()} | set(WITHOUT)
    scripts = sorted(f"benchmarks/{p.name}" for p in (ROOT / "benchmarks").glob("*.py") if p.name not in NOT_SCRIPTS)
    unlisted = [s for s in scripts if s not in used]
    assert not unlisted, (f"benchmark scripts with no manifest entry: {unlisted}; add an entry (results: [] until "
                          "it has run) or list it under scripts_without_results with a reason")


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_entry_is_complete(name: str):
    e = ENTRIES[name]
    assert isinstance(e.get("command"), str) and e["command"].startswith("python3 "), "command: 'python3 ...'"
    assert e["script"] in e["command"], f"command does not run its script {e['script']}"
    assert e.get("machine") in MANIFEST["machines"], f"machine {e.get('machine')!r} is not a listed kind"
    assert isinstance(e.get("timeout_s"), int) and e["timeout_s"] > 0
    assert e.get("schema") in SCHEMAS
    assert isinstance(e.get("results"), list)
    if e["results"]:
        prov = e.get("provenance") or {}
        assert isinstance(prov.get("ran_as"), str) and prov["ran_as"], "committed results need provenance.ran_as"
        assert prov.get("commit") is None or re.fullmatch(r"[0-9a-f]{7,40}", str(prov["commit"]))


SCHEMA1 = sorted({p for e in ENTRIES.values() if e.get("schema") == 1 for p in e.get("results") or []
                  if p.endswith(".json")})


@pytest.mark.parametrize("path", SCHEMA1 or ["(none committed yet)"])
def test_schema1_results_validate(path: str):
    if not SCHEMA1:
        pytest.skip("no schema-1 results committed yet")
    problems = validate_result(json.loads((ROOT / path).read_text()))
    assert not problems, f"{path}: {problems}"


def test_legacy_results_are_not_rewritten_into_schema_1():
    """Schema-0 files stay as committed: none of them is a schema-1 document (nothing re-dated)."""
    for e in ENTRIES.values():
        if e.get("schema") == 0:
            for p in e["results"]:
                if p.endswith(".json"):
                    assert validate_result(json.loads((ROOT / p).read_text())), f"{p} is schema 1: mark it so"


def test_no_session_scripts_remain():
    left = sorted(p.name for p in (ROOT / "benchmarks" / "gpu").glob("*.sh")) if (ROOT / "benchmarks" / "gpu").is_dir() else []
    assert not left, f"benchmarks/run.py replaces the GPU session scripts: {left}"


_PATH_IMPORT = re.compile(r"spec_from_file_location\(|sys\.path\.(insert|append)\(")


def test_tests_and_benchmarks_do_not_import_each_other_by_path():
    offenders = []
    for p in sorted((ROOT / "tests").rglob("*.py")):
        text = p.read_text()
        if _PATH_IMPORT.search(text) and "benchmarks" in text:
            offenders.append(p.relative_to(ROOT).as_posix())
    for p in sorted((ROOT / "benchmarks").rglob("*.py")):
        text = p.read_text()
        if re.search(r"spec_from_file_location\(", text) or re.search(r"^\s*(from|import) tests\b|\"tests\" /", text, re.M):
            offenders.append(p.relative_to(ROOT).as_posix())
    assert not offenders, f"import by file path between tests/ and benchmarks/: {offenders} (import benchmarks.x)"


# A test that puts a checkout of a reference implementation (not tests/ or benchmarks/) on sys.path.
_REFERENCE_CHECKOUTS = {"tests/unit/convert/test_yolo9_original.py": "imports the original YOLOv9 repository",
                        "tests/unit/convert/_sg_source.py": "loads super-gradients' network source files (the package itself cannot be imported)",
                        "tests/unit/convert/test_dfine_original.py": "loads the original D-FINE repository's source files"}


def test_tests_import_their_helpers_without_path_hacks():
    """A helper beside a test is imported by name (pytest puts the test's folder on sys.path), a
    benchmark module as ``benchmarks.x`` (pyproject ``pythonpath``): no test edits sys.path for them."""
    offenders = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "tests").rglob("*.py"))
                 if _PATH_IMPORT.search(p.read_text()) and p.relative_to(ROOT).as_posix() not in _REFERENCE_CHECKOUTS]
    assert not offenders, f"tests that load a module by file path: {offenders}"


def _flags(script: Path, seen: set[Path] | None = None) -> set[str]:
    """The --flags a benchmark script's parser declares (and those of benchmark modules it hands
    its arguments to, e.g. bench_dfine -> bench_rtdetr)."""
    seen = seen if seen is not None else set()
    if script in seen or not script.is_file():
        return set()
    seen.add(script)
    text = script.read_text()
    flags = set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", text))
    for mod in re.findall(r"from benchmarks import (\w+)|from benchmarks\.(\w+) import", text):
        name = next(m for m in mod if m)
        if not name.startswith("_"):
            flags |= _flags(script.parent / f"{name}.py", seen)
    return flags


@pytest.mark.parametrize("name", sorted(n for n, e in ENTRIES.items() if e["script"].startswith("benchmarks/")
                                        and (ROOT / e["script"]).is_file()))
def test_entry_command_uses_only_flags_its_script_declares(name: str):
    e = ENTRIES[name]
    used = {a.split("=", 1)[0] for a in e["command"].split() if a.startswith("--")}
    unknown = used - _flags(ROOT / e["script"])
    assert not unknown, f"{name}: {e['script']} declares no {sorted(unknown)}"

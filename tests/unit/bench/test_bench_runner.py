"""benchmarks/run.py: entry selection, time limits, logs and summary, packing with its fallback;
benchmarks/_common.py: write_result writes the one schema and validate_result catches breaks."""

from __future__ import annotations

import json
import sys
import tarfile
import time
from pathlib import Path

import pytest

from benchmarks import run
from benchmarks._common import command_line, validate_result, write_result

ENTRIES = {
    "bench_a": {"script": "benchmarks/run.py", "command": "python3 -c \"print('hello a')\"", "timeout_s": 30},
    "bench_b": {"script": "benchmarks/run.py", "command": "python3 -c \"import sys; sys.exit(3)\"", "timeout_s": 30},
    "slow": {"script": "benchmarks/run.py", "command": "python3 -c \"import time; time.sleep(60)\"", "timeout_s": 1},
    "ghost": {"script": "benchmarks/not_written_yet.py", "command": "python3 benchmarks/not_written_yet.py",
              "timeout_s": 5},
}


def test_select_expands_globs_in_order_once_and_rejects_unknown_names():
    assert run.select(ENTRIES, ["slow", "bench_*", "bench_a"]) == ["slow", "bench_a", "bench_b"]
    assert run.select(ENTRIES, []) == list(ENTRIES)
    with pytest.raises(SystemExit, match="no manifest entry matches 'nope'"):
        run.select(ENTRIES, ["nope"])


def test_out_folder_reads_the_commands_out_flag():
    assert run.out_folder("python3 benchmarks/x.py --out benchmarks/results/x --iters 3") == Path("benchmarks/results/x")
    assert run.out_folder("python3 benchmarks/x.py --out=docs") == Path("docs")
    assert run.out_folder("python3 -m pytest tests/gpu") is None


def test_run_entry_logs_output_and_exit_code(tmp_path: Path):
    ok = run.run_entry("bench_a", ENTRIES["bench_a"], log_dir=tmp_path, env={"PATH": ""}, cuda_devices="1")
    bad = run.run_entry("bench_b", ENTRIES["bench_b"], log_dir=tmp_path, env={"PATH": ""}, cuda_devices=None)
    assert ok["rc"] == 0 and not ok["timed_out"] and ok["cuda_visible_devices"] == "1"
    assert (tmp_path / "bench_a.log").read_text().strip() == "hello a"
    assert bad["rc"] == 3


def test_run_entry_stops_a_command_at_its_time_limit(tmp_path: Path):
    t0 = time.monotonic()
    rec = run.run_entry("slow", ENTRIES["slow"], log_dir=tmp_path, env={"PATH": ""}, cuda_devices=None)
    assert rec["rc"] == 124 and rec["timed_out"]
    assert time.monotonic() - t0 < 20


def test_missing_script_is_reported_not_run(tmp_path: Path):
    rec = run.run_entry("ghost", ENTRIES["ghost"], log_dir=tmp_path, env={}, cuda_devices=None)
    assert rec["rc"] is None and "does not exist" in rec["error"]


def test_lanes_run_wide_entries_alone_then_share_a_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    seen: list[tuple[str, str | None]] = []

    def fake(name, entry, *, log_dir, env, cuda_devices, limit_s=None):
        seen.append((name, cuda_devices))
        return {"name": name, "rc": 0, "seconds": 0.0}

    monkeypatch.setattr(run, "run_entry", fake)
    entries = {"a": {}, "wide": {"gpus": 2}, "b": {}, "c": {}}
    summary = run.Summary(tmp_path / "summary.json", commit="abc1234", names=list(entries))
    run.run_all(list(entries), entries, log_dir=tmp_path, env={}, gpus=["0", "1"], summary=summary)
    assert seen[0] == ("wide", "0,1")
    assert sorted(n for n, _ in seen[1:]) == ["a", "b", "c"] and {d for _, d in seen[1:]} <= {"0", "1"}
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["commit"] == "abc1234" and len(doc["entries"]) == 4


def test_main_writes_summary_with_rc_and_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(json.dumps({"entries": {k: ENTRIES[k] for k in ("bench_a", "bench_b")}}))
    monkeypatch.setattr(run, "prepare_env", lambda log_dir, commit, wheels: {"PATH": ""})
    rc = run.main(["bench_*", "--out", str(tmp_path / "res"), "--manifest", str(manifest), "--commit", "abc1234"])
    doc = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert rc == 1  # bench_b exits 3
    assert [(r["name"], r["rc"]) for r in doc["entries"]] == [("bench_a", 0), ("bench_b", 3)]
    assert all(isinstance(r["seconds"], float) for r in doc["entries"])


def test_pack_skips_checkpoints_and_falls_back_to_small_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "repo"
    res = root / "benchmarks" / "results" / "x"
    (res / "runs").mkdir(parents=True)
    (res / "x.json").write_text("{}")
    (res / "x.md").write_text("# x")
    (res / "w.pt").write_bytes(b"0" * 10)
    (res / "runs" / "r.json").write_text("{}")
    (res / "big.bin").write_bytes(bytes(range(256)) * 400)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "x.log").write_text("log")
    monkeypatch.setattr(run, "ROOT", root)
    names = lambda p: sorted(tarfile.open(p).getnames())  # noqa: E731
    out = run.pack(tmp_path / "o" / "results.tgz", log_dir=logs, folders=[Path("benchmarks/results/x")])
    assert names(out) == ["benchmarks/results/x/big.bin", "benchmarks/results/x/x.json",
                          "benchmarks/results/x/x.md", "runner/x.log"]
    monkeypatch.setattr(run, "PACK_LIMIT", 10)
    out = run.pack(tmp_path / "o" / "results.tgz", log_dir=logs, folders=[Path("benchmarks/results/x")])
    assert names(out) == ["benchmarks/results/x/x.json", "benchmarks/results/x/x.md", "runner/x.log"]


def test_write_result_writes_the_schema_and_the_markdown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "argv", [str(Path(run.ROOT) / "benchmarks" / "bench_x.py"), "--out", "/tmp/o x"])
    doc = write_result(tmp_path / "r.json", numbers={"ms": float("nan"), "rows": [1]}, extra={"iters": 3},
                       markdown="# R\n", commit="abc1234")
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk == {**doc, "numbers": {"ms": None, "rows": [1]}}
    assert on_disk["command"] == "python3 benchmarks/bench_x.py --out '/tmp/o x'" == command_line()
    assert on_disk["commit"] == "abc1234" and on_disk["schema"] == 1
    assert validate_result(on_disk) == []
    assert "python3 benchmarks/bench_x.py" in (tmp_path / "r.md").read_text()


@pytest.mark.parametrize("breakage, expected", [
    (lambda d: d.pop("numbers"), "numbers"),
    (lambda d: d.update(date="2026-11-29T15:42:46Z"), "date"),
    (lambda d: d.update(schema=0), "schema"),
    (lambda d: d.update(command=None), "command"),
    (lambda d: d.update(environment={}), "unknown top-level keys"),
    (lambda d: d.pop("cuda"), "cuda"),
])
def test_validate_result_names_what_is_wrong(tmp_path: Path, breakage, expected: str):
    doc = write_result(tmp_path / "r.json", numbers={"a": 1}, command="python3 benchmarks/x.py", commit="abc1234")
    breakage(doc)
    problems = validate_result(doc)
    assert problems and any(expected in p for p in problems), problems


def test_owed_keeps_entries_without_committed_results():
    entries = {"done": {**ENTRIES["bench_a"], "results": ["benchmarks/results/a.json"]},
               "owed": {**ENTRIES["bench_b"], "results": []}, "unlisted": dict(ENTRIES["bench_a"])}
    assert run.select(entries, [], owed=True) == ["owed", "unlisted"]
    assert run.select(entries, ["done", "owed"]) == ["done", "owed"]


def test_budget_skips_entries_whose_limit_no_longer_fits(tmp_path: Path):
    entries = {"quick": {**ENTRIES["bench_a"], "timeout_s": 5}, "long": {**ENTRIES["bench_a"], "timeout_s": 600}}
    summary = run.Summary(tmp_path / "summary.json", commit="abc", names=list(entries))
    run.run_all(list(entries), entries, log_dir=tmp_path, env={"PATH": ""}, gpus=None, summary=summary,
                budget=run.Budget(60))
    recs = {r["name"]: r for r in json.loads((tmp_path / "summary.json").read_text())["entries"]}
    assert recs["quick"]["rc"] == 0 and not recs["quick"].get("skipped")
    assert recs["long"]["skipped"] is True and recs["long"]["rc"] is None and "budget" in recs["long"]["error"]
    assert not (tmp_path / "long.log").exists()  # never started


def test_clamp_starts_a_long_entry_and_stops_it_at_the_budgets_end(tmp_path: Path):
    entries = {"quick": {**ENTRIES["bench_a"], "timeout_s": 5},
               "long": {**ENTRIES["slow"], "timeout_s": 600},
               "late": {**ENTRIES["bench_a"], "timeout_s": 600}}
    summary = run.Summary(tmp_path / "summary.json", commit="abc", names=list(entries))
    t0 = time.monotonic()
    run.run_all(list(entries), entries, log_dir=tmp_path, env={"PATH": ""}, gpus=None, summary=summary,
                budget=run.Budget(4, clamp_min_s=2))
    assert time.monotonic() - t0 < 30
    recs = {r["name"]: r for r in json.loads((tmp_path / "summary.json").read_text())["entries"]}
    assert recs["quick"]["rc"] == 0
    assert recs["long"]["rc"] == 124 and recs["long"]["timed_out"] and recs["long"]["limit_s"] <= 4.0
    assert recs["late"]["skipped"] is True  # less than clamp_min_s was left when its turn came


def test_lanes_may_share_one_gpu(tmp_path: Path):
    entries = {f"e{i}": {**ENTRIES["bench_a"], "command": "python3 -c \"import time; time.sleep(1)\""}
               for i in range(4)}
    summary = run.Summary(tmp_path / "summary.json", commit="abc", names=list(entries))
    t0 = time.monotonic()
    run.run_all(list(entries), entries, log_dir=tmp_path, env={"PATH": ""}, gpus=["0", "0"], summary=summary)
    recs = json.loads((tmp_path / "summary.json").read_text())["entries"]
    assert sorted(r["name"] for r in recs) == list(entries) and all(r["rc"] == 0 for r in recs)
    assert {r["cuda_visible_devices"] for r in recs} == {"0"}
    assert time.monotonic() - t0 < 3.9  # two lanes: about 2 s, not 4

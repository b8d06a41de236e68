"""IterableDataset streams end to end: `check` flags the unsharded one (iterable-duplicates),
never a sharded one; `bench` marks the rows whose workers replay the stream; `tune` keeps
0 workers for it and says why. Real CLI subprocesses, real workers."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
import real_streams

import stallscope as ss
from stallscope.checks.sharding import duplication_verdict
from stallscope.schema import record_schema


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stallscope", *args], capture_output=True, text=True, timeout=timeout
    )


def test_check_flags_the_unsharded_stream_with_exit_1(tmp_path, pipelines_dir):
    out = tmp_path / "check.json"
    proc = _cli(
        "check",
        f"{pipelines_dir / 'real_streams.py'}:unsharded",
        "--budget",
        "30",
        "--json",
        str(out),
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "iterable-duplicates" in proc.stdout
    record = json.loads(out.read_text())
    jsonschema.validate(record, record_schema())
    findings = record["findings"]
    (finding,) = [f for f in findings if f["code"] == "iterable-duplicates"]
    assert finding["severity"] == "error"
    evidence = finding["evidence"]
    # Each of the 2 workers replayed the first 256 records of the same stream.
    assert evidence["items_per_worker"] == {"0": 256, "1": 256}
    assert evidence["duplicated_samples"] == 512 and evidence["samples_compared"] == 512
    assert evidence["distinct_duplicates"] == 256 and evidence["same_order"] is True
    # The first duplicated samples are named: the same item at the same place in both streams.
    assert [e["positions"] for e in evidence["examples"]] == [{"0": i, "1": i} for i in range(3)]
    assert "(e.g. " in finding["message"]
    assert "get_worker_info()" in finding["fix"] and "islice" in finding["fix"]


def test_check_passes_the_sharded_stream(tmp_path, pipelines_dir):
    out = tmp_path / "check.json"
    proc = _cli(
        "check",
        f"{pipelines_dir / 'real_streams.py'}:sharded",
        "--budget",
        "30",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert "iterable-duplicates" not in [f["code"] for f in record["findings"]]
    assert record["coverage"]["probes"]["sharding"] == "done"  # it was looked at, and clean
    assert duplication_verdict(record["check_probes"]["sharding"])["duplicated"] is False


@pytest.mark.parametrize("shape", ["strided", "init_sharded", "random_stream"])
def test_other_sharded_or_random_streams_are_never_flagged(shape):
    result = ss.check(
        getattr(real_streams, shape), only=["iterable-duplicates"], start_method="fork"
    )
    assert result.codes == [], [f.message for f in result.findings]
    verdict = duplication_verdict(result.probes["sharding"])
    assert verdict["duplicated"] is False and verdict["duplicated_samples"] == 0
    assert verdict["workers_seen"] == 2 and verdict["samples_compared"] >= 2 * 64


def test_map_style_datasets_skip_the_stream_probe():
    import check_datasets as cd

    result = ss.check(cd.clean, only=["iterable-duplicates"])
    assert result.codes == [] and "sharding" not in result.probes
    assert result.coverage["probes"]["sharding"] == "not an IterableDataset"


def test_bench_marks_the_rows_whose_workers_replay_the_stream(tmp_path, pipelines_dir):
    out = tmp_path / "bench.json"
    proc = _cli(
        "bench",
        f"{pipelines_dir / 'real_streams.py'}:unsharded",
        "--num-workers",
        "0,2",
        "--repeats",
        "1",
        "--window",
        "0.3",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    jsonschema.validate(record, record_schema())
    rows = {r["config"]["num_workers"]: r for r in record["results"]}
    assert rows[0]["duplicates"] is None and rows[0]["speedup"] == pytest.approx(1.0)
    assert rows[2]["duplicates"]["duplicate_fraction"] == 1.0
    assert rows[2]["speedup"] is None and rows[2]["efficiency"] is None  # not a speed-up
    assert record["scaling"]["best_label"] == rows[0]["label"]  # copies never win
    assert (
        "⚠ w=2" in proc.stdout and "copies" in proc.stdout and "iterable-duplicates" in proc.stdout
    )


def test_bench_leaves_a_sharded_stream_unmarked(pipelines_dir):
    result = ss.bench(
        f"{pipelines_dir / 'real_streams.py'}:sharded",
        num_workers=[0, 2],
        repeats=1,
        min_window_s=0.3,
    )
    assert all(r.duplicates is None for r in result.results)
    assert all(r.speedup is not None for r in result.results)


def test_tune_keeps_zero_workers_for_the_unsharded_stream_and_says_why(tmp_path, pipelines_dir):
    out = tmp_path / "tune.json"
    proc = _cli(
        "tune",
        f"{pipelines_dir / 'real_streams.py'}:unsharded",
        "--budget",
        "8",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["best"]["config"]["num_workers"] == 0
    assert all(t["config"]["num_workers"] == 0 for t in record["trials"])
    notes = " ".join(record["search"]["notes"])
    assert "not sharded by worker" in notes and "duplicates" in notes

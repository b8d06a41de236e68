"""``stages`` and ``check`` on a torchdata.nodes graph and on thread-pool pipelines through the real
CLI (NOTE [declared stages], NOTE [pipeline checks]): rows named after the stages the pipeline
declares, memory read over the whole process tree."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _cli import run_stallscope

PIPELINES = Path(__file__).parent.parent / "pipelines"
TARGETS = "declared_stages.py"


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return run_stallscope(*args, cwd=PIPELINES, timeout=timeout)


@pytest.mark.parametrize(
    ("factory", "rows"),
    [
        ("nodes_threads", {"decode (ParallelMapper)", "collate (Mapper)", "Batcher"}),
        ("nodes_processes", {"decode (ParallelMapper)", "collate (Mapper)", "Batcher"}),
        ("pool_pipeline", {"decode", "augment", "collate"}),
    ],
)
def test_stages_of_a_graph_or_pool_are_the_ones_it_declares(tmp_path, factory, rows):
    out = tmp_path / "stages.json"
    done = run_cli("stages", f"{TARGETS}:{factory}", "--max-seconds", "4", "--json", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(out.read_text())
    names = {row["name"] for row in record["stages"]}
    assert rows <= names
    where = {row["name"]: row["where"] for row in record["stages"]}
    workers = "2 processes" if factory == "nodes_processes" else "4 threads"
    mapped = "decode (ParallelMapper)" if factory.startswith("nodes") else "decode"
    assert where[mapped] == workers
    assert where["collate" if factory == "pool_pipeline" else "collate (Mapper)"] == "main"
    run = record["stage_run"]
    assert run["batch_interval_ms"] > 0 and run["stage_ms_per_batch"] > 0
    assert "Per batch the declared stages take" in " ".join(done.stdout.split())


def test_a_jpeg_graph_with_process_mappers_accounts_for_the_hand_over(tmp_path):
    # Real Pillow decoding in two process mappers: the time no declared stage runs (items pickled
    # to and from the workers) is a row of its own, so the rows add up to the batch interval.
    out = tmp_path / "stages.json"
    done = run_cli(
        "stages", "declared_jpeg.py:nodes_jpeg_processes", "--max-seconds", "3", "--json", str(out)
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(out.read_text())
    where = {row["name"]: row["where"] for row in record["stages"]}
    assert where["decode (ParallelMapper 2)"] == "2 processes"
    assert where["augment (ParallelMapper 1)"] == "2 processes"
    assert where["between stages"] == "no stage running"
    run = record["stage_run"]
    total = run["stage_ms_per_batch"] + run["between_ms_per_batch"]
    assert total == pytest.approx(run["batch_interval_ms"], rel=0.02)
    assert sum(row["share"] for row in record["stages"]) == pytest.approx(1.0, rel=0.02)
    assert run["adds_up"] == pytest.approx(run["stage_ms_per_batch"] / run["batch_interval_ms"])


def test_check_flags_a_pool_pipeline_whose_memory_grows_every_epoch(tmp_path):
    out = tmp_path / "check.json"
    done = run_cli("check", f"{TARGETS}:leaking_pool", "--budget", "20", "--json", str(out))
    record = json.loads(out.read_text())
    assert done.returncode == 0, done.stderr[-2000:]  # a warning, not an error
    assert [f["code"] for f in record["findings"]] == ["memory-growth"]
    assert record["check_probes"]["tree_memory"]["judged_at"] == "epoch ends"
    said = " ".join(done.stdout.split())
    assert "not checked: duplicate-rng" in said  # what cannot run says why


def test_check_of_a_flat_pipeline_reads_its_pool_processes(tmp_path):
    out = tmp_path / "check.json"
    done = run_cli("check", f"{TARGETS}:process_pool_loader", "--budget", "15", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["findings"] == []
    readings = record["check_probes"]["tree_memory"]["readings"]
    assert readings and min(r["processes"] for r in readings) >= 3  # main + its pool of 2


def test_stages_of_a_thread_pool_library_pipeline(tmp_path):
    pytest.importorskip("mpire")
    out = tmp_path / "stages.json"
    done = run_cli("stages", f"{TARGETS}:mpire_pipeline", "--max-seconds", "4", "--json", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    where = {row["name"]: row["where"] for row in json.loads(out.read_text())["stages"]}
    assert where["decode"] == where["augment"] == "4 threads"
    assert where["collate"] == "main"


def test_bench_counts_the_pool_a_loader_starts_as_its_own(tmp_path):
    # NOTE [the whole process tree]: the 20 ms of CPU each item costs runs in the loader's pool.
    out = tmp_path / "bench.json"
    done = run_cli("bench", f"{TARGETS}:process_pool_loader", "--quiet", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())["results"][0]
    assert result["resources"]["n_workers"] >= 2
    assert result["cpu_ms_per_sample"] >= 15


def test_bench_counts_the_cpu_of_a_pool_opened_and_closed_every_epoch(tmp_path):
    # NOTE [CPU of processes that end]: the pool's processes end inside every window (epochs of
    # 4 batches); their 20 ms of CPU per item is still the loader's.
    out = tmp_path / "bench.json"
    done = run_cli(
        "bench", f"{TARGETS}:epoch_pool_loader", "--repeats", "1", "--quiet", "--json", str(out)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())["results"][0]
    assert result["cpu_ms_per_sample"] is not None and result["cpu_ms_per_sample"] >= 15
    # The window's workers CPU: about 20 ms of CPU per sample at the measured rate.
    rate = result["samples_per_s"]["median"]
    assert result["resources"]["workers_cpu_percent"] >= 0.75 * rate * 20 / 10

"""``stallscope check`` on the streams of real libraries that split their data between workers
themselves (NOTE [unsharded streams] in checks/sharding.py): Hugging Face ``datasets``'
``IterableDataset`` with as many shards as workers and with one shard, and litdata's
``StreamingDataLoader``. None may be flagged; what the probe saw says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import run_stallscope

from stallscope.checks.sharding import duplication_verdict

ROOT = Path(__file__).resolve().parents[2]


def _check(tmp_path, target: str) -> tuple[str, dict]:
    out = tmp_path / "check.json"
    done = run_stallscope(
        "check", target, "--only", "iterable-duplicates", "--json", str(out), cwd=ROOT
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert "iterable-duplicates" not in [f["code"] for f in record["findings"]]
    assert record["coverage"]["probes"]["sharding"] == "done", record["coverage"]
    return " ".join(done.stdout.split()), record


def test_hugging_face_stream_with_a_shard_per_worker_is_split_not_flagged(tmp_path):
    pytest.importorskip("datasets")
    _out, record = _check(tmp_path, "tests/pipelines/real_hf_datasets.py:make_stream_loader")
    verdict = duplication_verdict(record["check_probes"]["sharding"])
    # Both workers yielded rows, and no row came from both.
    assert verdict["duplicated"] is False and verdict["duplicated_samples"] == 0
    assert verdict["workers_seen"] == 2 and min(verdict["items_per_worker"].values()) >= 4


def test_hugging_face_stream_with_one_shard_leaves_a_worker_idle_not_duplicated(tmp_path):
    pytest.importorskip("datasets")
    said, record = _check(
        tmp_path, "tests/pipelines/real_hf_datasets.py:make_one_shard_stream_loader"
    )
    verdict = duplication_verdict(record["check_probes"]["sharding"])
    # The library stops the worker it has no shard for: every row came from worker 0.
    assert verdict["duplicated"] is False and verdict["idle_workers"] == 1
    assert verdict["items_per_worker"] == {"0": 256}
    assert "the stream ended with 1 of its 2 workers idle" in said


def test_litdata_streaming_loader_splits_by_worker_itself_and_is_not_flagged(tmp_path):
    pytest.importorskip("litdata")
    _out, record = _check(tmp_path, "tests/pipelines/real_litdata.py:make_loader")
    sharding = record["check_probes"]["sharding"]
    verdict = duplication_verdict(sharding)
    assert verdict["duplicated"] is False and verdict["duplicated_samples"] == 0
    # 256 items, half to each worker, each once.
    assert verdict["items_per_worker"] == {"0": 128, "1": 128}
    assert sharding["ended"] == "exhausted"

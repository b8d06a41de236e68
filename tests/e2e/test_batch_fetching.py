"""Datasets torch fetches a batch at a time, and what a worker's memory does that is no leak:
the pages of a memory-mapped file it reads, and large batches under the memory probe's tracing
(``tests/pipelines/batch_fetching.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import batch_fetching as bf
from _cli import run_stallscope

import stallscope as ss

PIPELINES = Path(bf.__file__).parent


def test_check_on_a_dataset_with_its_own_batch_fetch_collates_what_it_returns(tmp_path):
    # Table.__getitems__ returns one dict of batched tensors and its collate takes that dict: a
    # list of items (what __getitem__ gives) made every probe fail, and the check call it an error.
    out = tmp_path / "check.json"
    done = run_stallscope(
        "check", "batch_fetching.py:make_loader", "--budget", "15", "--json", str(out),
        cwd=PIPELINES, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(out.read_text())
    assert not record["findings"], [f["message"] for f in record["findings"]]
    probes = record["check_probes"]
    assert probes["memory"]["error"] is None and probes["memory"]["samples"] > 0
    assert probes["shm"]["batch_bytes"] > 0
    assert not any("could not" in note for note in record["coverage"].get("notes", []))


def test_the_tuner_profiles_and_races_a_dataset_with_its_own_batch_fetch():
    result = ss.tune(bf.make_loader, budget_s=6)
    assert result.config is not None and result.samples_per_s > 0
    # timed as torch fetches it: a batch a call, its rate per sample
    profile = result.profile
    assert profile.items >= 2 * 64 and profile.collate_s is not None


def test_the_pages_of_a_memory_mapped_file_a_worker_reads_are_not_memory_growth():
    result = ss.check(bf.mapped_loader, only=["memory-growth"], budget=12)
    assert not result.by_code("memory-growth"), [f.message for f in result.findings]
    workers = result.probes["memory"]["workers_memory"]
    first, last = workers[0]["points"][0], workers[0]["points"][-1]
    # the RSS grew by the file's pages the worker read (p[6]), as a mapped file's does
    assert last[2] - first[2] > 50 and last[6] - first[6] > 50


def test_large_batches_under_the_probes_tracing_are_not_memory_growth():
    # NOTE [tracing and the allocator]: 2 MiB float batches grew a traced worker's heap by about
    # 60 MB per 1,000 samples, and not at all untraced.
    result = ss.check(bf.wide_loader, only=["memory-growth"], budget=12)
    assert not result.by_code("memory-growth"), [f.message for f in result.findings]
    assert result.probes["memory"]["samples"] >= 1000

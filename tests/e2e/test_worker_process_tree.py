"""The memory probe reads each DataLoader worker with the processes it starts (NOTE [the whole
process tree] in runtime/resources.py): a helper a dataset launches inside its worker is the
worker's memory."""

from __future__ import annotations

import helper_process as hp

import stallscope as ss


def test_memory_that_grows_in_a_helper_the_worker_started_is_flagged():
    result = ss.check(hp.growing_helper, only=["memory-growth"], budget=12)
    [finding] = result.by_code("memory-growth")
    evidence = finding.evidence
    assert evidence["grew_in"] == "processes the worker started"
    # 512 KB kept per sample in the helper: about 500 MB per 1,000 samples of each worker.
    assert 300 <= evidence["native_mb_per_1000_samples"] <= 700, evidence
    assert evidence["children_grew_mb"] > 32
    assert "in those processes" in finding.message
    # The worker's own memory did not grow by that: it is the helper's.
    assert evidence["rss_mb_end"] - evidence["rss_mb_start"] < evidence["children_grew_mb"] / 4


def test_a_helper_that_keeps_nothing_is_not_growth():
    result = ss.check(hp.steady_helper, only=["memory-growth"], budget=12)
    assert not result.by_code("memory-growth")
    series = result.probes["memory"]["workers_memory"]
    assert series and all(len(w["points"][-1]) == 7 for w in series)  # the helper was read
    assert all(w["points"][-1][5] > 0 for w in series)

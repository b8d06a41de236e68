"""memory-growth and copy-on-write rules: made-up worker readings, exact numbers, no workers."""

from __future__ import annotations

import pytest

from stallscope.checks import analyse
from stallscope.checks.memory_rules import detect_copy_on_write, detect_memory_growth
from stallscope.checks.sampling import pilot_order, plan_order, stratified
from stallscope.growth import channel_growth, linear_fit

MB = 1024 * 1024
PASS = 128  # samples per worker in one pass over the probe's indices


def test_linear_fit_exact_line():
    slope, intercept, r2 = linear_fit([0, 1, 2, 3], [1, 3, 5, 7])
    assert (slope, intercept, r2) == (pytest.approx(2.0), pytest.approx(1.0), pytest.approx(1.0))


def _worker(
    heap,
    native,
    *,
    samples: int = 3 * PASS,
    step: int = 8,
    containers: tuple = ({}, {}),
    sites=None,
) -> dict:
    """Readings ``[samples, heap MB, RSS MB, t, tracemalloc MB]`` with RSS = 150 + heap + native +
    tracemalloc."""
    points = [
        [x, heap(x), 150.0 + heap(x) + native(x) + 0.5, x / 100, 0.5]
        for x in range(step, samples + 1, step)
    ]
    return {
        "worker": 0,
        "pid": 1,
        "points": points,
        "containers_start": containers[0],
        "containers_end": containers[1],
        "sites": sites or [],
    }


def _memory(*workers: dict, length: int = 1000) -> dict:
    return {
        "memory": {
            "workers": len(workers),
            "dataset_length": length,
            "pass_samples": PASS * len(workers),
            "workers_memory": list(workers),
        }
    }


def _flat(x: float) -> float:
    return 1.0


def test_a_list_that_keeps_every_sample_is_named_with_its_heap_growth():
    cache = (
        {"dataset.cache": [0, 56], "dataset.labels": [1000, 8056]},
        {"dataset.cache": [384, 3256], "dataset.labels": [1000, 8056]},
    )
    sites = [
        ["/site-packages/numpy/_core/numeric.py:385", 38.4, 400, "/data/ds.py:12"],
        ["<frozen abc>:123", 0.01, 50, None],
    ]
    worker = _worker(lambda x: 0.1 * x, _flat, containers=cache, sites=sites)
    [finding] = detect_memory_growth(
        {**_memory(worker, worker), "host": {"memory_available_bytes": 64 * 1024 * MB}}
    )
    evidence = finding.evidence
    assert finding.severity == "warning"
    assert evidence["cause"] == "python-heap"
    assert evidence["python_heap_mb_per_1000_samples"] == pytest.approx(100.0)
    assert evidence["native_mb_per_1000_samples"] == pytest.approx(0.0, abs=1e-6)
    assert evidence["plateaued_after_samples"] is None
    assert evidence["growing_attribute"] == "dataset.cache"
    assert [c["attribute"] for c in evidence["containers"]] == [
        "dataset.cache"
    ]  # the labels did not grow
    assert evidence["allocation_sites"] == [
        {"where": sites[0][0], "called_from": "/data/ds.py:12", "mb": 38.4, "blocks": 400}
    ]
    # an epoch of 1,000 samples across the workers: 100 MB
    assert evidence["projected_mb_per_epoch"] == pytest.approx(100.0)
    assert (
        "dataset.cache grows from 0 to 384 entries" in finding.message
        and "/data/ds.py:12" in finding.message
    )
    assert finding.fix.startswith("Bound dataset.cache")
    # an epoch that would not fit in memory: error
    [finding] = detect_memory_growth(
        {**_memory(worker), "host": {"memory_available_bytes": 64 * MB}}
    )
    assert finding.severity == "error"


def test_native_growth_that_stops_after_the_first_pass_is_budgeted_not_called_a_leak():
    worker = _worker(
        _flat, lambda x: 0.5 * min(x, 96)
    )  # 48 MB over the first 96 samples, then flat
    [finding] = detect_memory_growth(_memory(worker, worker))
    evidence = finding.evidence
    assert finding.severity == "info"
    assert evidence["cause"] == "native-first-pass"
    assert evidence["first_pass_mb"] == pytest.approx(44.0)  # from the first reading at 8 samples
    assert evidence["plateaued_after_samples"] == 88  # within 10% of the growth of its final level
    assert evidence["mb_per_1000_samples"] == pytest.approx(0.0, abs=1e-6)
    assert finding.message.startswith("First-pass growth of 44 MB per worker, flat afterwards")
    assert "it is not a leak" in finding.message
    assert "leak" not in finding.fix


def test_native_memory_that_keeps_growing_is_a_native_leak():
    worker = _worker(_flat, lambda x: 0.2 * x)
    [finding] = detect_memory_growth(_memory(worker))
    evidence = finding.evidence
    assert finding.severity == "warning"
    assert evidence["cause"] == "native" and evidence["plateaued_after_samples"] is None
    assert evidence["native_mb_per_1000_samples"] == pytest.approx(200.0)
    assert evidence["growing_attribute"] is None and evidence["allocation_sites"] == []
    assert (
        "does not level off over 3.0 passes" in finding.message and "native leak" in finding.message
    )
    # with less than two passes measured, it cannot tell a leak from a cache still filling
    [finding] = detect_memory_growth(_memory(_worker(_flat, lambda x: 0.5 * x, samples=PASS)))
    assert "fewer than two passes" in finding.message


def _with_children(worker: dict, children) -> dict:
    """The worker's points with the memory of the processes it started appended (``p[5]``)."""
    return worker | {"points": [[*p, children(p[0])] for p in worker["points"]]}


def test_memory_that_grows_in_a_process_the_worker_started_is_growth_and_says_where():
    # The worker's own memory is flat; the helper it launched keeps 0.3 MB per sample.
    worker = _with_children(_worker(_flat, _flat), lambda x: 3.0 + 0.3 * x)
    [finding] = detect_memory_growth(_memory(worker))
    evidence = finding.evidence
    assert evidence["cause"] == "native"
    assert evidence["native_mb_per_1000_samples"] == pytest.approx(300.0)
    assert evidence["grew_in"] == "processes the worker started"
    assert evidence["children_mb_start"] == pytest.approx(5.4)  # 3 + 0.3 x 8
    assert evidence["children_grew_mb"] == pytest.approx(0.3 * (3 * PASS - 8))
    assert "in those processes" in finding.message
    # The same growth in the worker itself is the worker's; helpers that stay flat change nothing.
    [own] = detect_memory_growth(
        _memory(_with_children(_worker(_flat, lambda x: 0.3 * x), lambda x: 3.0))
    )
    assert own.evidence["grew_in"] == "worker" and "in those processes" not in own.message
    assert detect_memory_growth(_memory(_with_children(_worker(_flat, _flat), lambda x: 3.0))) == []


def test_a_per_sample_cache_that_fills_in_the_first_pass_is_named():
    cache = ({"dataset.cache": [0, 56]}, {"dataset.cache": [128, 4000]})
    worker = _worker(lambda x: 0.25 * min(x, PASS), _flat, containers=cache)
    [finding] = detect_memory_growth(_memory(worker))
    assert finding.severity == "warning"
    assert finding.evidence["cause"] == "python-heap-first-pass"
    assert "dataset.cache keeps one entry per distinct sample" in finding.message


def test_a_leak_outranks_first_pass_growth_in_another_channel():
    worker = _worker(
        lambda x: 0.25 * min(x, PASS), lambda x: 0.2 * x
    )  # heap plateaus, native leaks
    [finding] = detect_memory_growth(_memory(worker))
    assert finding.evidence["cause"] == "native"


def test_allocator_steps_in_a_clean_image_pipeline_are_not_growth():
    # RSS of a demo (JPEG decode + augment) worker over 3.7 passes of a 200-image set, as
    # measured here: malloc arenas step up a few MB now and then; nothing is kept per sample.
    rss = [
        201.6,
        201.9,
        202.8,
        203.7,
        205.4,
        207.3,
        207.3,
        208.1,
        208.1,
        208.1,
        208.1,
        208.2,
        208.8,
        210.4,
        210.4,
        210.4,
    ]
    points = [[16.0 + 48.0 * k, 0.2, value, 0.1 * k, 0.1] for k, value in enumerate(rss)]
    memory = {
        "workers": 1,
        "dataset_length": 200,
        "pass_samples": 200,
        "workers_memory": [{"worker": 0, "points": points}],
    }
    assert detect_memory_growth({"memory": memory}) == []
    assert analyse({"memory": memory}, codes={"memory-growth"}) == []


def test_channel_growth_needs_half_a_pass_after_the_first_to_judge_a_plateau():
    xs = [float(x) for x in range(8, PASS + 40, 8)]
    ys = [min(x, 64.0) for x in xs]
    assert (
        channel_growth(xs, ys, PASS, 16.0)["plateaued_after"] is None
    )  # too little after the first pass
    xs = [float(x) for x in range(8, 2 * PASS + 1, 8)]
    ys = [min(x, 64.0) for x in xs]
    assert channel_growth(xs, ys, PASS, 16.0)["plateaued_after"] == 64.0


def _series(rss_per_sample: float, uss_per_sample: float, n: int = 20, step: float = 100.0) -> dict:
    points = [
        [k * step, 200.0 + rss_per_sample * k * step, 10.0 + uss_per_sample * k * step, k * 0.1]
        for k in range(n)
    ]
    return {"pid": 1, "points": points, "cpu_percent": 90.0}


def test_copy_on_write_needs_private_growth_with_flat_rss_and_a_python_heap():
    memory = {
        "start_method": "fork",
        "workers": 2,
        "dataset_length": 10_000,
        "python_heap": {"bytes": 50 * MB, "objects": 400_000, "complete": True},
        "series": [_series(0.0, 0.01), _series(0.0, 0.01)],
    }  # +19 MB private, RSS flat
    [finding] = detect_copy_on_write({"memory": memory})
    assert finding.evidence["mb_per_worker"] == pytest.approx(19.0)
    assert finding.evidence["parent_python_heap_mb"] == pytest.approx(50.0)
    assert finding.evidence["dataset_fraction_read"] == pytest.approx(0.19)
    assert finding.evidence["projected_mb_per_worker"] == pytest.approx(50.0)  # bounded by the heap
    # the same numbers growing RSS too are a leak, not copy-on-write
    memory["series"] = [_series(0.01, 0.01)]
    assert detect_copy_on_write({"memory": memory}) == []
    # spawn workers do not share the parent's pages
    memory.update(start_method="spawn", series=[_series(0.0, 0.01)])
    assert detect_copy_on_write({"memory": memory}) == []
    # no Python objects to speak of: allocator noise, not copy-on-write
    memory.update(start_method="fork", python_heap={"bytes": 1 * MB, "objects": 10})
    assert detect_copy_on_write({"memory": memory}) == []


# -- which indices check fetches -------------------------------------------------------------------


def test_stratified_draws_one_index_per_stratum():
    import random

    picks = stratified(2000, 100, random.Random(0))
    assert len(picks) == 100
    assert [p // 20 for p in picks] == list(range(100))


def test_pilot_takes_the_ends_then_spreads_over_the_range():
    order = pilot_order(2000, 64, seed=0)
    assert order[:2] == [0, 1999] and len(set(order)) == 64
    assert sorted(pilot_order(10, 64, seed=0)) == list(range(10))


def test_plan_fetches_every_index_left_when_they_fit_else_as_many_as_fit_stratified():
    checked = set(pilot_order(2000, 64, seed=0))
    rest = plan_order(2000, checked, fits=5000, seed=0)
    assert sorted(rest) == sorted(set(range(2000)) - checked)
    some = plan_order(2000, checked, fits=200, seed=0)
    assert 180 <= len(some) <= 200 and not set(some) & checked
    # spread over the range: every tenth of it is represented
    assert {i * 10 // 2000 for i in some} == set(range(10))


def test_the_record_schema_requires_the_memory_growth_split():
    import jsonschema

    from stallscope.schema import record_schema

    worker = _worker(_flat, lambda x: 0.2 * x)
    [finding] = detect_memory_growth(_memory(worker))
    host = {"cores": 2, "memory_bytes": 2**33, "torch": "2.13.0", "cuda": None, "gpu": None}
    record = {
        "schema": 1,
        "tool_version": "0",
        "command": "check",
        "target": "t",
        "host": host,
        "findings": [finding.to_dict()],
    }
    schema = record_schema()
    jsonschema.validate(record, schema)
    del record["findings"][0]["evidence"]["plateaued_after_samples"]
    with pytest.raises(jsonschema.ValidationError, match="plateaued_after_samples"):
        jsonschema.validate(record, schema)


def test_a_clean_pipelines_small_native_growth_is_no_finding():
    # The demo's probe workers (Pillow decode, fork) grew about 22 MB of native memory over three
    # passes without levelling off, while the same dataset in one process stays flat: allocator
    # arenas and pages a fork child touches first. Below NATIVE_MIN_MB that is not a leak.
    worker = _worker(_flat, lambda x: 22.0 * x / (3 * PASS))
    assert detect_memory_growth(_memory(worker)) == []

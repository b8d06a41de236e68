"""check analysis: pure rules over made-up measurements (exact numbers, no workers)."""

from __future__ import annotations

import functools
import sqlite3
import threading

import pytest

from stallscope.checks import CODES, Finding, analyse
from stallscope.checks.health import timing_summary
from stallscope.checks.pickler import try_pickle
from stallscope.checks.pickling import find_culprits
from stallscope.checks.rng import (
    duplicated_streams,
    find_rng_attributes,
    rng_fingerprint,
    sample_digest,
)
from stallscope.checks.rules import (
    detect_collate_error,
    detect_duplicate_rng,
    detect_getitem_error,
    detect_hang,
    detect_oversubscription,
    detect_shm_too_small,
    detect_slow_samples,
    detect_unpicklable,
    outlier_threshold,
    slow_candidates,
)
from stallscope.checks.stacks import parse_stack, stuck_frame

MB = 1024 * 1024


# -- findings ----------------------------------------------------------------------------------


def test_finding_rejects_unknown_code_and_severity():
    with pytest.raises(ValueError):
        Finding("slow", "warning", "m")
    with pytest.raises(ValueError):
        Finding("hang", "fatal", "m")
    f = Finding("hang", "error", "m", {"index": 3}, "fix it")
    assert Finding.from_dict(f.to_dict()) == f
    assert set(f.to_dict()) == {"code", "severity", "message", "evidence", "fix"}


def test_analyse_orders_errors_first_and_filters_codes():
    probes = {
        "health": {
            "kind": "map",
            "fetched": 10,
            "errors_total": 1,
            "timeout_s": 2.0,
            "errors": [
                {
                    "index": 4,
                    "type": "KeyError",
                    "message": "KeyError: 'x'",
                    "where": "d.py:3 in f",
                    "seconds": 0.0,
                }
            ],
            "hangs": [],
            "timing": {"count": 3},
        },
        "shm": {
            "free_bytes": 100 * MB,
            "batch_bytes": 20 * MB,
            "prefetch_factor": 2,
            "num_workers": 2,
        },
    }
    found = analyse(probes)
    assert [f.code for f in found] == ["getitem-error", "shm-too-small"]
    assert [f.severity for f in found] == ["error", "warning"]
    assert [f.code for f in analyse(probes, codes={"shm-too-small"})] == ["shm-too-small"]
    assert analyse({}) == []


# -- slow samples --------------------------------------------------------------------------------


def test_outlier_threshold_uses_mad_and_absolute_floors():
    # noise-free 10 ms samples: the absolute 50 ms gap decides
    assert outlier_threshold(0.010, 0.0) == pytest.approx(0.060)
    # spread-out samples: 6 robust sigmas decide
    assert outlier_threshold(0.100, 0.050) == pytest.approx(0.100 + 6 * 1.4826 * 0.050)
    # slow median: "4× the median" decides
    assert outlier_threshold(1.0, 0.0) == pytest.approx(4.0)


def test_slow_candidates_picks_only_outliers_slowest_first():
    times = {i: 0.010 + 0.001 * (i % 3) for i in range(40)}
    times[7] = 0.5
    times[21] = 0.3
    assert slow_candidates(times) == [7, 21]
    assert slow_candidates({1: 0.01, 2: 5.0}) == []  # too few samples to call outliers


def _health(**overrides):
    base = {
        "kind": "map",
        "fetched": 64,
        "errors_total": 0,
        "timeout_s": 10.0,
        "timing": timing_summary(sorted([0.01] * 62 + [0.4, 0.3])),
        "slowest": [[5, 0.4], [17, 0.3], [2, 0.01]],
        "retimed": [[5, 0.41], [17, 0.012]],
        "errors": [],
        "hangs": [],
        "crashes": [],
        "collate": {"batches": 8, "errors_total": 0, "errors": [], "collate_fn": "default_collate"},
    }
    base.update(overrides)
    return base


def test_slow_samples_requires_a_confirmed_retime():
    [finding] = detect_slow_samples({"health": _health()})
    assert finding.code == "slow-samples" and finding.severity == "warning"
    assert finding.evidence["indices"] == [5]
    assert finding.evidence["seconds"] == [0.4]
    assert finding.evidence["retimed_seconds"] == [0.41]
    assert finding.evidence["transient"] == [17]  # fast the second time: a hiccup, not the sample
    assert "index 5" in finding.message and "400.0 ms" in finding.message
    assert detect_slow_samples({"health": _health(retimed=[])}) == []


def test_slow_samples_also_from_the_memory_probe_fetched_twice():
    # The memory probe reached index 900, which the sample-health probe did not; it fetched it
    # in two passes, slow both times. Index 31 was slow once only.
    fetches = {
        "timing": timing_summary(sorted([0.01] * 200 + [0.5, 0.3])),
        "slowest": [[900, 0.5, 0.48], [31, 0.3, 0.01], [4, 0.01]],
        "distinct_indices": 202,
        "new_indices": 150,
    }
    [finding] = detect_slow_samples({"health": _health(), "memory": {"fetch_times": fetches}})
    assert finding.evidence["indices"] == [5, 900]
    assert finding.evidence["found_by_memory_probe"] == [900]
    assert finding.evidence["retimed_seconds"] == [0.41, 0.48]
    assert finding.evidence["checked"] == 64 + 150
    # the memory probe alone
    [finding] = detect_slow_samples({"memory": {"fetch_times": fetches}})
    assert finding.evidence["indices"] == [900]


def test_timing_summary_median_and_mad():
    summary = timing_summary([1.0, 2.0, 3.0, 4.0, 100.0])
    assert summary["median_s"] == 3.0
    assert summary["mad_s"] == 1.0
    assert summary["max_s"] == 100.0
    assert timing_summary([]) == {"count": 0}


# -- hang / getitem / collate ----------------------------------------------------------------------


def test_hang_names_index_and_line():
    hang = {
        "index": 3,
        "worker": 0,
        "pid": 11,
        "waited_s": 2.1,
        "where": "/d/ds.py:42 in __getitem__",
        "stack": ["/usr/lib/python3.11/threading.py:327 in wait", "/d/ds.py:42 in __getitem__"],
    }
    [finding] = detect_hang({"health": _health(hangs=[hang], timeout_s=2.0)})
    assert finding.severity == "error"
    assert (
        finding.evidence["index"] == 3 and finding.evidence["where"] == "/d/ds.py:42 in __getitem__"
    )
    assert finding.message == (
        "dataset[3] did not return within 2 s; the worker was stuck at /d/ds.py:42 in __getitem__."
    )


_HUNG_AT_ZERO = {
    "index": 0,
    "worker": 0,
    "pid": 11,
    "waited_s": 2.1,
    "where": "/lib/engine.py:28 in run",
    "stack": ["/usr/lib/python3.11/queue.py:171 in get", "/lib/engine.py:28 in run"],
}


def test_a_hang_that_a_fresh_interpreters_worker_does_not_share_is_the_fork_after_use():
    health = _health(hangs=[_HUNG_AT_ZERO], timeout_s=2.0)
    health["threads_at_fork"] = ["DAFTIO ×2", "tokio-rt-worker"]
    health["fork_control"] = {"returned": True, "seconds": 0.0123, "where": None, "note": None}
    [finding] = detect_hang({"health": health})
    assert finding.severity == "warning" and finding.evidence["cause"] == "fork-after-use"
    assert finding.message.startswith(
        "Workers forked from a process that has already run the pipeline hang: dataset[0] was "
        "stuck at /lib/engine.py:28 in run, and returned in 12.3 ms in a worker forked from a "
        "fresh interpreter. The pipeline's library runs on threads it starts at first use (this "
        "process ran DAFTIO ×2, tokio-rt-worker)"
    )
    assert "forkserver" in finding.fix and "worker_init_fn" in finding.fix
    assert "Bound the blocking call" not in finding.fix


@pytest.mark.parametrize(
    ("control", "says"),
    [
        ({"returned": False, "seconds": None, "where": "/lib/engine.py:28 in run"}, " too."),
        ({"returned": None, "seconds": None, "where": None, "note": "an object"}, "in run."),
    ],
)
def test_a_hang_a_fresh_interpreter_shares_or_could_not_test_stays_an_error(control, says):
    health = _health(hangs=[_HUNG_AT_ZERO], timeout_s=2.0)
    health["fork_control"] = control
    [finding] = detect_hang({"health": health})
    assert finding.severity == "error" and "cause" not in finding.evidence
    assert finding.message.endswith(says) and finding.evidence["fork_control"] == control
    assert "Bound the blocking call" in finding.fix


def test_getitem_error_counts_and_groups():
    errors = [
        {
            "index": 6,
            "type": "KeyError",
            "message": "KeyError: 6",
            "where": "/d/ds.py:9 in __getitem__",
            "seconds": 0.0,
        },
        {
            "index": 8,
            "type": "OSError",
            "message": "OSError: truncated",
            "where": "/d/ds.py:7 in __getitem__",
            "seconds": 0.0,
        },
    ]
    [finding] = detect_getitem_error({"health": _health(errors=errors, errors_total=2, fetched=30)})
    assert finding.message == "dataset[6] raised KeyError: 6; 2 of 32 fetched samples fail."
    assert finding.evidence["types"] == {"KeyError": 1, "OSError": 1}
    assert finding.evidence["indices"] == [6, 8]


def test_worker_crash_is_reported_as_getitem_error():
    errors = [
        {
            "index": 4,
            "type": "WorkerCrash",
            "message": "the worker process died while fetching it (killed by SIGSEGV)",
            "where": None,
            "seconds": None,
        }
    ]
    [finding] = detect_getitem_error({"health": _health(errors=errors, errors_total=1)})
    assert "died while fetching dataset[4]" in finding.message and "SIGSEGV" in finding.message


def test_collate_error_names_the_mixed_shapes():
    error = {
        "indices": [0, 1],
        "error": "RuntimeError: stack expects each tensor to be equal size",
        "where": "collate.py:1 in f",
        "item_structures": [
            {"structure": "Tensor[3] float32", "indices": [0]},
            {"structure": "Tensor[4] float32", "indices": [1]},
        ],
    }
    [finding] = detect_collate_error(
        {
            "health": _health(
                collate={
                    "batches": 4,
                    "errors_total": 1,
                    "errors": [error],
                    "collate_fn": "default_collate",
                }
            )
        }
    )
    assert "Tensor[3] float32 and Tensor[4] float32" in finding.message
    assert "pad" in finding.fix


# -- shm and threads -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free_mb", "severity"),
    [(8, "error"), (24, "warning"), (64, None)],
)
def test_shm_in_flight_vs_free(free_mb, severity):
    probes = {
        "shm": {
            "free_bytes": free_mb * MB,
            "batch_bytes": 4 * MB,
            "prefetch_factor": 2,
            "num_workers": 2,
        }
    }
    found = detect_shm_too_small(probes)
    if severity is None:
        assert found == []
    else:
        assert found[0].severity == severity
        assert found[0].evidence["in_flight_mb"] == 16.0


def test_oversubscription_counts_blas_only_when_workers_ran_parallel():
    report = {"torch": 1, "cv2": None, "openblas": 8, "openmp": 1, "env": {}}
    probes = {
        "threads": {
            "report": report,
            "num_workers": 4,
            "cores": 8,
            "worker_cpu_percent": [95.0, 97.0],
        }
    }
    assert detect_oversubscription(probes) == []  # idle BLAS pool in single-threaded workers
    probes["threads"]["worker_cpu_percent"] = [380.0, 390.0]
    [finding] = detect_oversubscription(probes)
    assert finding.evidence["threads_per_worker"] == 8 and finding.evidence["demand"] == 32
    report2 = {"torch": 1, "cv2": 8, "env": {}}
    [finding] = detect_oversubscription(
        {"threads": {"report": report2, "num_workers": 2, "cores": 4, "worker_cpu_percent": []}}
    )
    assert finding.evidence["pools"] == {"torch": 1, "cv2": 8}


# -- unpicklable -----------------------------------------------------------------------------------


class _Holder:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def _make_closure():
    factor = 3

    def scale(x):
        return x * factor

    return scale


@pytest.mark.parametrize(
    ("value", "kind", "path"),
    [
        (lambda x: x, "lambda", "dataset.transform.fn"),
        (_make_closure(), "local function", "dataset.transform.fn"),
        (threading.Lock(), "lock", "dataset.transform.fn"),
        ((i for i in range(3)), "generator", "dataset.transform.fn"),
    ],
)
def test_find_culprits_names_path_and_kind(value, kind, path):
    dataset = _Holder(transform=_Holder(fn=value), data=[1, 2, 3])
    [culprit] = find_culprits(dataset, "dataset")
    assert culprit.path == path
    assert culprit.kind == kind


def test_find_culprits_file_db_partial_and_long_lists(tmp_path):
    handle = open(tmp_path / "labels.txt", "w")  # noqa: SIM115
    db = sqlite3.connect(":memory:")
    try:
        items = list(range(500)) + [lambda: 0] + list(range(500))
        dataset = _Holder(
            fh=handle, db=db, steps=[abs, functools.partial(max, lambda: 1)], items=items
        )
        culprits = {c.path: c.kind for c in find_culprits(dataset, "dataset")}
        assert culprits == {
            "dataset.fh": "open file",
            "dataset.db": "connection",
            "dataset.steps[1].args[0]": "lambda",
            "dataset.items[500]": "lambda",
        }
    finally:
        handle.close()
        db.close()


def test_try_pickle_replaces_arrays_with_stand_ins():
    import numpy as np
    import torch

    error, size, array_bytes, _ = try_pickle({"x": torch.zeros(1000, 1000), "y": np.zeros(10)})
    assert error is None and size < 1000 and array_bytes == 4_000_000 + 80
    assert try_pickle(threading.Lock())[0] is not None


def test_detect_unpicklable_message_and_severity():
    root = {
        "name": "dataset",
        "type": "m.DS",
        "ok": False,
        "culprits": [
            {
                "path": "dataset.transform.fn",
                "kind": "lambda",
                "description": "lambda defined at ds.py:12",
                "error": "PicklingError: x",
            }
        ],
    }
    [finding] = detect_unpicklable(
        {"pickling": {"roots": [root]}, "settings": {"pinned_start_method": None}}
    )
    assert finding.severity == "error"
    assert finding.message.startswith("dataset.transform.fn is a lambda defined at ds.py:12")
    assert (
        finding.evidence["attribute"] == "dataset.transform.fn"
        and finding.evidence["attribute_type"] == "lambda"
    )
    [pinned] = detect_unpicklable(
        {"pickling": {"roots": [root]}, "settings": {"pinned_start_method": "fork"}}
    )
    assert pinned.severity == "warning"
    loaded = {
        "name": "dataset",
        "type": "nb.DS",
        "ok": True,
        "culprits": [],
        "load_error": "ModuleNotFoundError: No module named 'nb'",
    }
    [finding] = detect_unpicklable({"pickling": {"roots": [loaded]}})
    assert "freshly spawned worker cannot load it" in finding.message


# -- rng -------------------------------------------------------------------------------------------


def test_find_rng_attributes_skips_global_generators():
    import random

    import numpy as np
    import torch

    dataset = _Holder(
        rng=np.random.default_rng(0),
        aug=_Holder(py=random.Random(1), gen=torch.Generator(), legacy=np.random.RandomState(2)),
        global_np=np.random.mtrand._rand,
        global_torch=torch.default_generator,
        secure=random.SystemRandom(),
    )
    found = {a.path: a.type for a in find_rng_attributes(dataset)}
    assert found == {
        "dataset.rng": "numpy.random.Generator",
        "dataset.aug.py": "random.Random",
        "dataset.aug.gen": "torch.Generator",
        "dataset.aug.legacy": "numpy.random.RandomState",
    }
    a = np.random.default_rng(5)
    b = np.random.default_rng(5)
    assert rng_fingerprint(a) == rng_fingerprint(b)
    a.random()
    assert rng_fingerprint(a) != rng_fingerprint(b)


def test_sample_digest_is_content_based():
    import torch

    assert sample_digest((torch.ones(3), 1)) == sample_digest((torch.ones(3), 1))
    assert sample_digest((torch.ones(3), 1)) != sample_digest((torch.ones(3), 2))
    assert sample_digest({"a": torch.zeros(2)}) != sample_digest({"a": torch.zeros(3)})


def _report(worker, digests, rng_state="s1", globals_=None):
    return {
        "worker": worker,
        "digests": digests,
        "globals": globals_
        or {"random": f"r{worker}", "numpy": f"n{worker}", "torch": f"t{worker}"},
        "attributes": {"dataset.rng": rng_state},
    }


def test_duplicated_streams_and_the_rule():
    record = {
        "kind": "map",
        "repeats": 3,
        "workers": 2,
        "start_method": "fork",
        "indices": [0, 0, 0, 5],
        "attributes": [
            {"path": "dataset.rng", "type": "numpy.random.Generator", "parent_fingerprint": "s0"}
        ],
        "epochs": [
            [_report(0, ["a", "b", "c", "d"]), _report(1, ["a", "b", "c", "d"])],
            [_report(0, ["a", "b", "c", "d"]), _report(1, ["a", "b", "c", "d"])],
        ],
        "with_seed_worker": [
            [_report(0, ["a", "b", "c", "d"], "x"), _report(1, ["e", "f", "g", "h"], "y")],
            [_report(0, ["i", "j", "k", "l"], "z"), _report(1, ["m", "n", "o", "p"], "w")],
        ],
    }
    verdict = duplicated_streams(record)
    assert verdict["random"] and verdict["across_workers"] and verdict["across_epochs"]
    assert verdict["attributes"] == [
        {"path": "dataset.rng", "across_workers": True, "across_epochs": True}
    ]
    [finding] = detect_duplicate_rng({"rng": record})
    assert finding.evidence["attributes"][0]["path"] == "dataset.rng"
    assert finding.evidence["fixed_by_seed_worker"] is True
    assert "dataset.rng (numpy.random.Generator)" in finding.message
    assert "started, is copied into each" in finding.message
    # two generators (a MONAI Compose holds one per random transform) are named, in the plural
    second = "dataset.transform.transforms[4].R"
    record["attributes"].append(
        {"path": second, "type": "numpy.random.RandomState", "parent_fingerprint": "s0"}
    )
    for epoch in record["epochs"]:
        for report in epoch:
            report["attributes"][second] = "s1"
    [finding] = detect_duplicate_rng({"rng": record})
    assert "transforms[4].R (numpy.random.RandomState), created before" in finding.message
    assert "started, are copied into each" in finding.message


def test_deterministic_pipeline_is_not_duplicate_rng():
    # the same samples everywhere, but the pipeline is not random at all
    record = {
        "kind": "map",
        "repeats": 3,
        "attributes": [],
        "epochs": [[_report(0, ["a", "a", "a", "d"]), _report(1, ["a", "a", "a", "d"])]],
    }
    assert duplicated_streams(record)["random"] is False
    assert detect_duplicate_rng({"rng": record}) == []
    # random pipeline with distinct streams
    record["epochs"] = [[_report(0, ["a", "b", "c", "d"]), _report(1, ["e", "f", "g", "h"])]]
    assert detect_duplicate_rng({"rng": record}) == []


# -- stacks ----------------------------------------------------------------------------------------


def test_parse_stack_takes_the_main_thread_and_the_user_frame():
    text = (
        "MAIN 0x00000000000000aa\n"
        "Thread 0x00000000000000bb (most recent call first):\n"
        '  File "/x/watch.py", line 5 in _watch_parent\n\n'
        "Current thread 0x00000000000000aa (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 327 in wait\n'
        '  File "/data/ds.py", line 42 in __getitem__\n'
        '  File "/x/health.py", line 124 in _fetch_indices\n'
    )
    frames = parse_stack(text)
    assert [f["line"] for f in frames] == [327, 42, 124]
    assert stuck_frame(frames)["file"] == "/data/ds.py"


def test_codes_are_the_spec_list():
    assert CODES == (
        "unpicklable",
        "duplicate-rng",
        "memory-growth",
        "iterable-duplicates",
        "copy-on-write",
        "slow-samples",
        "hang",
        "getitem-error",
        "collate-error",
        "shm-too-small",
        "oversubscription",
    )


def test_opencv_threads_count_only_where_the_pipeline_uses_opencv():
    import cv2
    import real_detection
    from check_datasets import CleanDataset as Clean

    from stallscope.checks.threads import thread_report, uses_module

    # The detection dataset's module imports cv2; the clean dataset's does not, even though
    # cv2 is loaded in this process (as it is in a fork worker of a parent that imported it).
    assert uses_module([real_detection.MosaicDataset.__new__(real_detection.MosaicDataset)], cv2)
    assert not uses_module([Clean.__new__(Clean)], cv2)
    assert thread_report(Clean.__new__(Clean))["cv2"] is None
    assert (
        thread_report(real_detection.MosaicDataset.__new__(real_detection.MosaicDataset))["cv2"]
        == cv2.getNumThreads()
    )

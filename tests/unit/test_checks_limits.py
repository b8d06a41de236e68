"""Checks that know their limits (issue 17): an error a probe's own machinery caused is not a
finding but "not checked: <reason>"; memory that returns every epoch is not growth; copy-on-write
is measured on anonymous memory, not on RSS that lazily mapped libraries raise."""

from __future__ import annotations

import io

import torch

from stallscope.checks.findings import codes_of_probe
from stallscope.checks.memory_rules import detect_copy_on_write, detect_memory_growth
from stallscope.checks.pickler import pickle_real, try_pickle
from stallscope.checks.pickling import PicklingProbe
from stallscope.checks.runner import CheckRun
from stallscope.checks.util import machinery_error, probe_error_texts


class _TensorFromArrayState:
    """Rebuilds a tensor from its pickled array, as array-backed tokenizers do."""

    def __init__(self) -> None:
        self.ranks = torch.arange(6).reshape(3, 2)

    def __getstate__(self):
        return {"ranks": self.ranks.numpy().copy()}

    def __setstate__(self, state):
        self.ranks = torch.as_tensor(state["ranks"])


def test_the_fresh_load_pickles_real_payloads_not_stand_ins():
    import pickle

    obj = _TensorFromArrayState()
    sized = io.BytesIO()
    assert try_pickle(obj, sized)[0] is None
    try:  # the sizing pickle holds a stand-in, which this object cannot load from
        pickle.loads(sized.getvalue())
        loaded_stand_in = True
    except RuntimeError as exc:
        loaded_stand_in = False
        assert "_ArrayStandIn" in str(exc)
    assert not loaded_stand_in
    real = io.BytesIO()
    assert pickle_real(obj, real) is None
    assert torch.equal(pickle.loads(real.getvalue()).ranks, obj.ranks)


def test_a_fresh_load_that_cannot_be_tried_is_not_checked(tmp_path):
    probe = PicklingProbe({"dataset": _TensorFromArrayState()}, tmp_path)
    import stallscope.checks.pickling as pickling

    limit = pickling.FRESH_LOAD_MAX_ARRAY_BYTES
    pickling.FRESH_LOAD_MAX_ARRAY_BYTES = 8
    try:
        probe.start()
    finally:
        pickling.FRESH_LOAD_MAX_ARRAY_BYTES = limit
    assert probe.process is None
    assert probe.note.startswith("not checked: loading in a fresh interpreter")
    assert probe.results[0].ok and probe.results[0].load_error is None


def test_machinery_errors_are_told_from_the_pipeline_s_own():
    daemonic = "AssertionError: daemonic processes are not allowed to have children"
    assert "worker processes of its own" in machinery_error(daemonic)
    assert machinery_error("RuntimeError: Could not infer dtype of _ArrayStandIn")
    assert machinery_error("OSError: truncated shard") is None
    assert machinery_error(None) is None
    record = {
        "errors": [
            {
                "type": "AssertionError",
                "message": "daemonic processes are not allowed to have children",
            }
        ],
        "init_error": None,
        "collate": {"errors": []},
    }
    assert any(machinery_error(t) for t in probe_error_texts(record))


class _Pipeline:
    target = "fake"
    is_iterable = False
    batch_size = 4
    dataset = None
    collate_fn = None
    worker_init_fn = None

    def length(self):
        return 8


def _run(tmp_path, codes):
    return CheckRun(
        _Pipeline(),
        codes=codes,
        timeout=1.0,
        budget=10.0,
        full=False,
        workers=2,
        start_method="fork",
        seed=0,
        shm_free_override=None,
        workdir=tmp_path,
        on_progress=None,
        on_update=None,
    )


def test_a_probe_whose_record_holds_a_machinery_error_is_not_checked(tmp_path):
    run = _run(tmp_path, ["getitem-error", "slow-samples"])

    def health():
        run.probes["health"] = {
            "errors": [
                {
                    "index": 0,
                    "type": "AssertionError",
                    "message": "daemonic processes are not allowed to have children",
                }
            ],
            "errors_total": 1,
            "fetched": 0,
        }
        run.probe_status["health"] = "done"

    run._guarded("health", health)
    run.publish()
    assert run.result.findings == []
    entry = run.result.coverage["not_checked"][0]
    assert entry["probe"] == "health" and entry["codes"] == ["slow-samples", "getitem-error"]
    assert "worker processes of its own" in entry["reason"]
    assert run.probe_status["health"].startswith("not checked: ")


def test_a_probe_that_fails_is_not_checked_with_its_reason(tmp_path):
    run = _run(tmp_path, ["memory-growth", "copy-on-write"])

    def memory():
        raise RuntimeError("psutil could not read /proc")

    run._guarded("memory", memory)
    run.publish()
    [entry] = run.result.coverage["not_checked"]
    assert entry["probe"] == "memory" and set(entry["codes"]) == {"memory-growth", "copy-on-write"}
    assert "psutil could not read /proc" in entry["reason"]
    assert codes_of_probe("shm") == ["shm-too-small"]


def _stream_memory(boundaries_per_worker, points_per_worker):
    return {
        "memory": {
            "workers": 2,
            "pass_samples": None,
            "dataset_length": 800,
            "iterable": True,
            "workers_memory": [
                {
                    "worker": w,
                    "points": points_per_worker[w],
                    "epoch_boundaries": boundaries_per_worker[w],
                    "containers_start": {},
                    "containers_end": {},
                    "sites": [],
                }
                for w in range(2)
            ],
        },
        "host": {"memory_available_bytes": 8 << 30},
    }


def _sawtooth(amplitude: float, leak_per_epoch: float):
    """Points inside the epochs rise by ``amplitude`` MB and fall back; each epoch end reads
    ``leak``× higher."""
    points, boundaries = [], [[0, 0.0, 100.0, 0.0, 0.1, 0]]
    for epoch in range(3):
        for k in range(1, 11):
            count = epoch * 400 + k * 40
            heap = epoch * leak_per_epoch + amplitude * k / 10
            points.append([count, heap, 100.0 + heap + 30.0, 0.0, 0.1])
        boundaries.append(
            [
                (epoch + 1) * 400,
                (epoch + 1) * leak_per_epoch,
                130.0 + (epoch + 1) * leak_per_epoch,
                0.0,
                0.1,
                epoch + 1,
            ]
        )
    return points, boundaries


def test_memory_that_returns_every_epoch_is_not_growth():
    points, boundaries = _sawtooth(amplitude=40.0, leak_per_epoch=0.0)
    assert detect_memory_growth(_stream_memory([boundaries] * 2, [points] * 2)) == []


def test_memory_that_does_not_return_at_epoch_ends_is_growth():
    points, boundaries = _sawtooth(amplitude=40.0, leak_per_epoch=30.0)
    [finding] = detect_memory_growth(_stream_memory([boundaries] * 2, [points] * 2))
    assert finding.code == "memory-growth"
    assert (
        finding.evidence["judged_at"] == "epoch ends" and finding.evidence["epoch_ends_seen"] == 3
    )
    assert "end of each of 3 epochs" in finding.message


def _cow(points):
    return {
        "memory": {
            "start_method": "fork",
            "dataset_length": 30_000,
            "python_heap": {"bytes": 19 << 20, "objects": 212_000},
            "series": [{"pid": 1, "points": p} for p in points],
        }
    }


def test_copy_on_write_is_not_hidden_by_lazily_mapped_library_pages():
    # [samples, rss, uss, t, private_dirty, anonymous]: worker 2's RSS rose 13 MB of shared library
    # code after the baseline; its private-dirty memory rose 10 MB with no new anonymous
    # memory: copied.
    worker1 = [[16, 220.3, 10.1, 0.0, 9.0, 60.0], [1536, 220.6, 16.2, 1.4, 15.0, 60.2]]
    worker2 = [[16, 207.6, 5.5, 0.0, 5.0, 60.0], [1536, 220.6, 16.0, 1.4, 15.2, 60.2]]
    [finding] = detect_copy_on_write(_cow([worker1, worker2]))
    assert finding.evidence["per_worker_mb"] == [5.8, 10.0]
    assert finding.evidence["anonymous_change_mb"] == [0.2, 0.2]


def test_new_allocations_are_not_copy_on_write():
    grows = [[16, 200.0, 10.0, 0.0, 9.0, 60.0], [1536, 230.0, 40.0, 1.4, 39.0, 90.0]]
    assert detect_copy_on_write(_cow([grows, grows])) == []

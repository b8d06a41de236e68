"""Stages that add up (NOTE [stages add up]): a row that cannot fit in the measured time per batch
is doubtful, not a cost; deserialise is the main thread's CPU time (NOTE [deserialise timing])."""

from __future__ import annotations

import pickle
import time

from stallscope.breakdown.results import StageTime
from stallscope.breakdown.table import mark_doubtful
from stallscope.breakdown.workers import batch_interval_ms


def _row(name, ms, kind, where):
    return StageTime(name=name, ms_per_sample=ms, share=0.0, kind=kind, where=where)


def _table(deserialise_ms_per_sample):
    return [
        _row("other (__getitem__)", 3.0, "other", "worker"),
        _row("collate", 0.1, "collate", "worker"),
        _row("transfer: serialise", 0.05, "serialise", "worker"),
        _row("transfer: queue", 0.2, "queue", "worker→main"),
        _row("transfer: deserialise", deserialise_ms_per_sample, "deserialise", "main"),
    ]


def test_a_main_side_stage_longer_than_the_time_per_batch_is_doubtful():
    # 8 samples per batch: deserialise 29 ms per batch while a batch arrived every 14.3 ms
    rows = mark_doubtful(
        _table(29.0 / 8), batch_interval_ms=14.3, num_workers=2, samples_per_batch=8
    )
    deserialise = rows[-1]
    assert (
        deserialise.doubtful
        and "29.0 ms per batch" in deserialise.doubtful
        and "14.3 ms" in deserialise.doubtful
    )
    assert deserialise.share == 0.0
    assert abs(sum(r.share for r in rows) - 1.0) < 1e-9
    assert not any(r.doubtful for r in rows[:-1])


def test_stages_that_fit_are_left_alone():
    rows = mark_doubtful(_table(0.05), batch_interval_ms=30.0, num_workers=2, samples_per_batch=8)
    assert not any(r.doubtful for r in rows)
    # worker stages: 3.15 ms x 8 = 25 ms per batch fits in 2 workers x 30 ms, not in 1 worker
    # x 12 ms
    rows = mark_doubtful(_table(0.05), batch_interval_ms=12.0, num_workers=1, samples_per_batch=8)
    assert [r.name for r in rows if r.doubtful] == ["other (__getitem__)"]


def test_no_interval_no_judgement():
    rows = mark_doubtful(_table(100.0), batch_interval_ms=None, num_workers=1, samples_per_batch=8)
    assert not any(r.doubtful for r in rows)


def test_the_interval_leaves_out_the_prefetched_batches():
    arrivals = [0.0, 0.001, 0.002, 0.003, 0.004, 0.1, 0.2, 0.3]  # 4 buffered batches arrive at once
    assert abs(batch_interval_ms(arrivals, num_workers=2) - 1000 * 0.3 / 3) < 1e-9
    assert batch_interval_ms(arrivals[:4], num_workers=2) is None


class _SlowToUnpickle:
    """Sleeps while it is unpickled: wall time that is not the main thread's work (a wait)."""

    def __reduce__(self):
        return (_wait, (0.05,))


def _wait(seconds):
    time.sleep(seconds)
    return None


def test_deserialise_is_cpu_time_and_the_wait_is_kept_apart():
    from stallscope.breakdown.recorder import StageBatch

    sent = StageBatch(_SlowToUnpickle(), {}, 1, 0, time.monotonic())
    received = pickle.loads(pickle.dumps(sent))
    assert received.transfer.deserialise < 0.02
    assert received.transfer.deserialise_wait >= 0.04

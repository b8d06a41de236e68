"""``check`` on a pipeline without a Dataset (NOTE [pipeline checks]): a batch that never comes is
a hang, an exception is reported, what cannot run says why."""

from __future__ import annotations

import threading

from stallscope.checks.findings import CODES
from stallscope.checks.pipeline_checks import NOT_RUN, check_pipeline
from stallscope.target import pipeline_from_object


class _Stuck:
    """Three batches, then waits for ``release`` (a lock no worker frees)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __iter__(self):
        for i in range(3):
            yield [i]
        self.release.wait(30)


class _Raising:
    def __iter__(self):
        yield [1]
        raise KeyError("shard-7")


def test_a_batch_that_never_comes_is_a_hang_with_where_it_waits():
    stuck = _Stuck()
    pipeline = pipeline_from_object(stuck, label="stuck")
    try:
        result = check_pipeline(pipeline, codes=list(CODES), timeout=0.5, budget=10.0)
    finally:
        stuck.release.set()
    (hang,) = result.by_code("hang")
    assert hang.evidence["batches_before"] == 3
    assert "wait" in hang.message


def test_an_exception_while_iterating_is_reported_and_the_rest_says_why():
    pipeline = pipeline_from_object(_Raising(), label="raising")
    result = check_pipeline(pipeline, codes=list(CODES), timeout=5.0, budget=10.0)
    (raised,) = result.by_code("getitem-error")
    assert "KeyError" in raised.message and raised.evidence["batches_before"] == 1
    unchecked = {code for e in result.coverage["not_checked"] for code in e["codes"]}
    assert unchecked >= set(NOT_RUN)

"""The sample-health probe's pipe messages: one frozen dataclass per kind, each surviving pickle."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from stallscope.checks import messages
from stallscope.checks.messages import (
    AskThreads,
    Collated,
    CollateFailed,
    Done,
    Exhausted,
    Fetch,
    Fetched,
    FetchFailed,
    InitFailed,
    Next,
    Ready,
    Started,
    Stop,
    ThreadReport,
)

EXAMPLES = [
    Fetch([3, 1, 4], True),
    Next(8, False),
    AskThreads(),
    Stop(),
    Ready(),
    Started(7),
    Started("w1#3"),
    Fetched(7, 0.0125),
    FetchFailed(9, 0.5, "ValueError", "ValueError: bad sample 9", "data.py:12 in __getitem__"),
    Collated([0, 1], 0.001, 4096, "tuple(Tensor[2, 3] float32, Tensor[2] int64)"),
    CollateFailed(
        [0, 1],
        "RuntimeError: stack expects equal size",
        None,
        [["Tensor[3]", [0]], ["Tensor[4]", [1]]],
    ),
    Exhausted(),
    Done(),
    ThreadReport({"torch_threads": 1, "pools": []}),
    InitFailed("OSError: no such file", "init.py:3 in worker_init"),
]


def test_every_message_kind_has_an_example():
    kinds = {
        obj
        for obj in vars(messages).values()
        if dataclasses.is_dataclass(obj) and isinstance(obj, type) and obj is not messages.Signal
    }
    assert kinds == {type(m) for m in EXAMPLES}


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("protocol", [pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL])
def test_a_message_round_trips_through_pickle(message, protocol):
    copy = pickle.loads(pickle.dumps(message, protocol=protocol))
    assert type(copy) is type(message)
    assert copy == message
    assert dataclasses.asdict(copy) == dataclasses.asdict(message)


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_a_message_is_frozen(message):
    fields = dataclasses.fields(message)
    if not fields:
        return
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(message, fields[0].name, None)


def test_a_message_crosses_a_real_pipe():
    import multiprocessing

    parent, child = multiprocessing.Pipe()
    try:
        for message in EXAMPLES:
            child.send(message)
            assert parent.recv() == message
    finally:
        parent.close()
        child.close()

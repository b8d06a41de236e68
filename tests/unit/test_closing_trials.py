"""Closing what a trial opened (NOTE [closing iterators] in pipeline/kinds.py): the iterators
``iter()`` made are closed, the user's own objects are not, and a close that overruns its
deadline parks the objects instead of blocking the command."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

from stallscope.pipeline import kinds
from stallscope.pipeline.kinds import close_trial, parked
from stallscope.pipeline.structure import describe_structure, nbytes


class Closable:
    """An iterator with a close() of its own, counting the calls."""

    def __init__(self, inner: object = None, gate: threading.Event | None = None) -> None:
        self.inner = inner
        self.closes = 0
        self.gate = gate

    def __iter__(self) -> Closable:
        return self

    def __next__(self) -> int:
        return 1

    def close(self) -> None:
        if self.gate is not None:
            self.gate.wait()
        self.closes += 1


class Loader:
    def __init__(self, held: object = None, gate: threading.Event | None = None) -> None:
        self.held = held  # the user's: reachable from the loader
        self.gate = gate

    def __iter__(self) -> Closable:
        return Closable(Closable(self.held, self.gate), self.gate)


@pytest.fixture(autouse=True)
def no_parked(monkeypatch):
    monkeypatch.setattr(kinds, "_PARKED", [])


def test_the_iterators_iter_opened_are_closed_outermost_first():
    loader = Loader()
    iterator = iter(loader)
    close_trial(loader, iterator)
    assert iterator.closes == 1 and iterator.inner.closes == 1
    assert not parked()


def test_what_the_loader_holds_is_the_users_and_stays_open():
    held, stream = Closable(), io.BytesIO(b"data")
    loader = Loader(held=[held, stream])
    iterator = iter(loader)
    iterator.inner.file = io.BytesIO(b"more")  # a file only the iterator holds is data too
    close_trial(loader, iterator)
    assert iterator.closes == 1
    assert held.closes == 0 and not stream.closed and not iterator.inner.file.closed


def test_a_loader_that_is_its_own_iterator_is_not_closed():
    loader = Closable()
    close_trial(loader, loader)
    assert loader.closes == 0


def test_a_close_past_its_deadline_parks_the_objects_and_returns():
    gate = threading.Event()
    loader = Loader(gate=gate)
    iterator = iter(loader)
    close_trial(loader, iterator, deadline=0.05)  # the close waits on the gate: always overruns
    try:
        assert parked()
        assert any(obj is iterator for obj in kinds._PARKED)
        assert iterator.closes == 0
    finally:
        gate.set()


def test_array_subclasses_are_described_as_what_they_extend():
    class SharedArray(np.ndarray):  # grain's SharedMemoryArray, defined outside NumPy
        pass

    shared = np.zeros((4, 3), dtype=np.float32).view(SharedArray)
    assert describe_structure({"image": shared}) == describe_structure(
        {"image": np.zeros((4, 3), dtype=np.float32)}
    )
    assert nbytes(shared) == 48


def test_a_factorys_trial_configs_are_labelled_with_the_knobs_its_call_takes():
    from pathlib import Path

    from stallscope.config import LoaderConfig
    from stallscope.target import load_target

    target = Path(__file__).parents[1] / "pipelines" / "closing_iterator.py"
    pipeline = load_target(f"{target}:make_loader")  # make_loader(num_workers=...) only
    trial = pipeline.baseline.replace(num_workers=2)
    assert trial.prefetch_factor == 2  # the DataLoader default the config holds...
    assert trial.label() == "w=2"  # ...is not shown: the factory's call never passes it
    assert "label_knobs" not in trial.to_dict()
    assert trial == LoaderConfig.from_dict(trial.to_dict())  # how it is shown is not compared

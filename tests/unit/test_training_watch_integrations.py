"""The callbacks' fallback (hook gaps), driven by fake trainers that have no fetch to wrap.

With the real frameworks the callbacks time the fetch itself: tests/e2e/test_lightning_real.py
and tests/e2e/test_huggingface_real.py. Here a trainer without Lightning's fit loop, or a
caller that is no ``transformers.Trainer``, makes them fall back, and they must say so.
"""

from __future__ import annotations

import types

import pytest

from stallscope.integrations.huggingface import StallscopeTrainerCallback
from stallscope.integrations.lightning import StallscopeCallback


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeModule:
    def __init__(self) -> None:
        self.logged: list[tuple[str, float]] = []

    def log(self, name: str, value: float) -> None:
        self.logged.append((name, value))


def drive_lightning(
    cb, clock, *, epochs=2, batches=5, fetch=0.01, step=0.03, first=0.2, validate_after=None
):
    """Call hooks in the order Lightning's fit loop does, advancing a fake clock."""
    trainer = types.SimpleNamespace(world_size=1, is_global_zero=True)
    module = FakeModule()
    cb.on_validation_start(trainer, module)  # sanity check before training: must be ignored
    clock.advance(1.0)
    cb.on_validation_end(trainer, module)
    for _ in range(epochs):
        cb.on_train_epoch_start(trainer, module)
        for i in range(batches):
            clock.advance(first if i == 0 else fetch)
            cb.on_train_batch_start(trainer, module, batch=None, batch_idx=i)
            clock.advance(step)
            cb.on_train_batch_end(trainer, module, outputs=None, batch=None, batch_idx=i)
            if validate_after == i:
                cb.on_validation_start(trainer, module)
                clock.advance(3.0)  # validation: not data wait
                cb.on_validation_end(trainer, module)
        clock.advance(0.5)  # epoch-end work
        cb.on_train_epoch_end(trainer, module)
    cb.on_train_end(trainer, module)
    return module


def test_lightning_callback_measures_data_wait_between_batches():
    clock = FakeClock()
    cb = StallscopeCallback(
        clock=clock, sample_resources=False, gpu=False, print_summary=False, log_metrics=True
    )
    module = drive_lightning(cb, clock, validate_after=2)
    d = cb.to_dict()
    assert d["total_steps"] == 10 and d["epochs"] == 2 and d["steps"] == 8
    assert d["stall_fraction"] == pytest.approx(0.25)
    assert d["first_batch_s"] == pytest.approx(0.2)
    assert d["data_ms"]["max"] == pytest.approx(
        10.0
    )  # validation and epoch ends never count as data wait
    assert d["compute_ms"]["max"] == pytest.approx(30.0)
    assert module.logged == [("stallscope/stall_fraction", pytest.approx(0.25))] * 2
    assert d["timing"]["method"] == "hook-gaps"
    assert (
        "input-bound" in cb.summary()
        and "other callbacks' per-batch work counts as data wait" in cb.summary()
    )


def test_lightning_callback_sync_runs_at_each_batch_end():
    clock = FakeClock()
    syncs = []
    cb = StallscopeCallback(
        clock=clock,
        sync=lambda: syncs.append(clock()),
        sample_resources=False,
        gpu=False,
        print_summary=False,
    )
    drive_lightning(cb, clock, epochs=1, batches=4)
    assert len(syncs) == 4
    assert cb.to_dict()["sync"]["calls"] == 4


def test_lightning_callback_prints_summary_on_global_zero(capsys):
    clock = FakeClock()
    cb = StallscopeCallback(clock=clock, sample_resources=False, gpu=False)
    drive_lightning(cb, clock, epochs=1, batches=3)
    assert "stallscope train" in capsys.readouterr().out


def test_huggingface_callback_counts_optimizer_steps_and_skips_logging():
    clock = FakeClock()
    cb = StallscopeTrainerCallback(
        clock=clock, sample_resources=False, gpu=False, print_summary=False
    )
    args, state, control = (
        types.SimpleNamespace(world_size=1),
        types.SimpleNamespace(is_world_process_zero=True),
        object(),
    )
    cb.on_init_end(args, state, control)  # any other Trainer event is a no-op
    cb.on_train_begin(args, state, control)
    cb.on_epoch_begin(args, state, control)
    for i in range(6):
        clock.advance(0.3 if i == 0 else 0.02)
        cb.on_step_begin(args, state, control)
        clock.advance(0.06)
        cb.on_step_end(args, state, control)
        if i == 2:
            clock.advance(2.0)  # logging + evaluation right after the step
            cb.on_evaluate(args, state, control)
            cb.on_log(args, state, control)
    cb.on_epoch_end(args, state, control)
    cb.on_train_end(args, state, control)
    d = cb.to_dict()
    assert d["timing"]["method"] == "hook-gaps"
    assert d["total_steps"] == 6 and d["steps"] == 5
    assert d["stall_fraction"] == pytest.approx(0.25)
    assert d["data_ms"]["max"] == pytest.approx(20.0)

"""StallscopeTrainerCallback inside a real Hugging Face ``Trainer.train`` (with accelerate) on CPU.

Every item costs 20 ms to fetch (num_workers=0, batch size 1) and every
forward 30 ms; the truth comes from the dataset's own fetch log
(tests/pipelines/framework_timing.py). accelerate's ``DataLoaderShard``
fetches one batch ahead, so an epoch's measured steps start with item 2's
fetch. Scenarios from issue 12: gradient accumulation 2, ``max_steps``
across an epoch boundary, two epochs, a run resumed from a checkpoint, and
a busy callback after stallscope's.

Those costs are slept on a fake clock that the callback reads too (see
tests/e2e/test_lightning_real.py): the figures are the dataset's and the
model's exactly, whatever the machine's load. The occupancy test, with real
workers, runs on real time.
"""

from __future__ import annotations

import warnings

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch  # noqa: E402
from framework_timing import (  # noqa: E402
    Clock,
    FakeClock,
    TimedItems,
    assert_stall_near_truth,
    true_stall,
)

from stallscope.integrations.huggingface import StallscopeTrainerCallback  # noqa: E402

FETCH_S = 0.02
FORWARD_S = 0.03
ITEMS = 16
# On the fake clock the figures are exact: what is left is the rounding of the callback's figures.
TOLERANCE = 1e-3
LOOKAHEAD = 1  # DataLoaderShard iterates one batch ahead


class SleepModel(torch.nn.Module):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x, labels):
        self.clock.sleep(FORWARD_S)
        return {"loss": ((self.layer(x).squeeze(-1) - labels) ** 2).mean()}


class EpochEnds(transformers.TrainerCallback):
    """Listed after stallscope's: when each epoch ended."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.times: list[float] = []

    def on_epoch_end(self, args, state, control, **kwargs):
        self.times.append(self.clock())


class BusyCallback(transformers.TrainerCallback):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.sleep(0.01)


def train(
    tmp_path,
    *,
    accumulate=1,
    epochs=1,
    max_steps=-1,
    busy=False,
    save_steps=None,
    resume=None,
    items=None,
    eval_every=None,
    evaluations=None,
):
    clock = items.clock if items is not None else FakeClock()
    items = items or TimedItems(ITEMS, FETCH_S, as_dict=True, clock=clock)
    cb = StallscopeTrainerCallback(print_summary=False, sample_resources=False, clock=clock)
    ends = EpochEnds(clock)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=1,
        gradient_accumulation_steps=accumulate,
        num_train_epochs=epochs,
        max_steps=max_steps,
        logging_steps=10_000,
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        eval_strategy="steps" if eval_every else "no",
        eval_steps=eval_every,
        per_device_eval_batch_size=1,
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    callbacks = [cb, ends] + ([BusyCallback(clock)] if busy else [])
    evaluation = TimedItems(3, 0.001, as_dict=True, clock=clock) if eval_every else None
    trainer = transformers.Trainer(
        model=SleepModel(clock),
        args=args,
        train_dataset=items,
        eval_dataset=evaluation,
        callbacks=callbacks,
    )
    if (
        evaluations is not None
    ):  # the test's own wrap, on the instance as a user might: kept after training
        evaluate = trainer.evaluate

        def timed_evaluate(*a, **k):
            start = clock()
            result = evaluate(*a, **k)
            evaluations.append((start, clock()))
            return result

        trainer.evaluate = timed_evaluate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(resume_from_checkpoint=resume)
    return cb, ends.times, items


def truth_of(items: TimedItems, ends: list[float], per_epoch: int = ITEMS) -> float:
    first = 1 + LOOKAHEAD
    epochs = [
        (e * per_epoch + first, min((e + 1) * per_epoch, len(items.fetches)), end)
        for e, end in enumerate(ends)
    ]
    return true_stall(items.fetches, epochs)


def check(cb: StallscopeTrainerCallback, truth: float, *, steps: int) -> dict:
    d = cb.to_dict()
    assert_stall_near_truth(d, truth, steps=steps, framework="huggingface", tolerance=TOLERANCE)
    return d


def test_gradient_accumulation_counts_every_micro_batch(tmp_path):
    cb, ends, items = train(tmp_path, accumulate=2, busy=True)
    check(cb, truth_of(items, ends), steps=ITEMS - 1)


def test_two_epochs(tmp_path):
    cb, ends, items = train(tmp_path, epochs=2)
    d = check(cb, truth_of(items, ends), steps=2 * (ITEMS - 1))
    assert d["epochs"] == 2


def test_max_steps_across_an_epoch_boundary(tmp_path):
    items = TimedItems(8, FETCH_S, as_dict=True, clock=FakeClock())
    cb, ends, items = train(tmp_path, epochs=5, max_steps=12, items=items)
    assert len(ends) == 2
    d = check(cb, truth_of(items, ends, per_epoch=8), steps=12 - 2)
    assert d["total_steps"] == 12


def test_evaluation_inside_training_is_neither_data_nor_compute(tmp_path):
    evaluations: list[tuple[float, float]] = []
    cb, ends, items = train(tmp_path, eval_every=5, busy=True, evaluations=evaluations)
    assert len(evaluations) >= 3
    first = 1 + LOOKAHEAD
    d = check(
        cb, true_stall(items.fetches, [(first, ITEMS, ends[0])], evaluations), steps=ITEMS - 1
    )
    # no evaluation (3 fetches and forwards: 93 ms) counted as a wait or as compute
    assert d["data_ms"]["max"] == pytest.approx(FETCH_S * 1000, abs=0.01)
    assert d["compute_ms"]["max"] == pytest.approx((FORWARD_S + 0.01) * 1000, abs=0.01)


def test_resumed_from_a_checkpoint(tmp_path):
    train(tmp_path, save_steps=6, max_steps=6)
    checkpoint = next(tmp_path.glob("checkpoint-6"))
    items = TimedItems(ITEMS, FETCH_S, as_dict=True, clock=FakeClock())
    cb, ends, items = train(tmp_path / "resumed", resume=str(checkpoint), items=items)
    fetched = len(items.fetches)
    assert fetched == ITEMS - 6  # accelerate skipped the 6 trained batches without fetching them
    truth = true_stall(items.fetches, [(1 + LOOKAHEAD, fetched, ends[0])])
    check(cb, truth, steps=fetched - 1)


def test_occupancy_is_sampled_through_accelerates_lookahead(tmp_path):
    cb = StallscopeTrainerCallback(print_summary=False, sample_interval=0.02)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=1,
        num_train_epochs=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=2,
        disable_tqdm=True,
        logging_steps=10_000,
    )
    items = TimedItems(24, FETCH_S, as_dict=True)
    trainer = transformers.Trainer(
        model=SleepModel(Clock()), args=args, train_dataset=items, callbacks=[cb]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    d = cb.to_dict()
    assert d["occupancy"] is not None and d["occupancy"]["capacity"] == 4
    assert d["resources"]["n_workers"] == 2
    assert "stallscope train" in cb.summary()
    assert "get_batch_samples" not in vars(trainer)  # the wrap is removed after training

"""StallscopeCallback inside a real Lightning ``Trainer.fit`` on CPU, against the dataset's
own timings.

Every item costs 20 ms to fetch (num_workers=0, batch size 1) and every
``training_step`` 30 ms. The truth is computed from the dataset's logged
fetch times (tests/pipelines/framework_timing.py), never from stallscope.
Scenarios from issue 12: a busy callback (10 ms in ``on_train_batch_end``)
listed after and before stallscope's, validation every few steps, gradient
accumulation, two epochs, and a run resumed mid-epoch from a checkpoint.

Those costs are slept on a fake clock that the callback reads too: Lightning's
own loop takes no time on it, so every wait and step the callback reports is
the dataset's and the module's exactly, whatever the machine's load (a wait put
on the wrong side of a step boundary shows as a difference of a whole fetch).
The occupancy test, with real workers, runs on real time.
"""

from __future__ import annotations

import warnings

import pytest

L = pytest.importorskip("lightning.pytorch")

import torch  # noqa: E402
from framework_timing import (  # noqa: E402
    Clock,
    FakeClock,
    TimedItems,
    assert_stall_near_truth,
    true_stall,
)
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402

from stallscope.integrations.lightning import StallscopeCallback  # noqa: E402

FETCH_S = 0.02
STEP_S = 0.03
ITEMS = 16
# On the fake clock the figures are exact: what is left is the rounding of the callback's figures.
TOLERANCE = 1e-3


class SleepModule(L.LightningModule):
    """A one-layer model whose training step sleeps STEP_S; logs validation runs and epoch ends."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.layer = torch.nn.Linear(4, 1)
        self.validations: list[tuple[float, float]] = []
        self.epoch_ends: list[float] = []
        self._val_start = 0.0

    def training_step(self, batch, batch_idx):
        self.clock.sleep(STEP_S)
        return self.layer(batch).sum()

    def validation_step(self, batch, batch_idx):
        self.clock.sleep(0.005)

    def on_validation_start(self) -> None:
        self._val_start = self.clock()

    def on_validation_end(self) -> None:
        self.validations.append((self._val_start, self.clock()))

    def on_train_epoch_end(self) -> None:  # runs after the callbacks' on_train_epoch_end
        self.epoch_ends.append(self.clock())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class BusyCallback(L.Callback):
    """Another callback's per-batch work (10 ms): compute, never data wait."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.clock.sleep(0.01)


def callback(clock: FakeClock, **options) -> StallscopeCallback:
    return StallscopeCallback(print_summary=False, sample_resources=False, clock=clock, **options)


def fit(
    clock,
    callbacks,
    *,
    epochs=1,
    val_every=None,
    accumulate=1,
    ckpt_path=None,
    module=None,
    items=None,
):
    items = items or TimedItems(ITEMS, FETCH_S, clock=clock)
    module = module or SleepModule(clock)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=any(isinstance(c, L.callbacks.ModelCheckpoint) for c in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        val_check_interval=val_every,
        limit_val_batches=3 if val_every else 0,
        accumulate_grad_batches=accumulate,
        callbacks=callbacks,
    )
    val = DataLoader(TimedItems(3, 0.001, clock=clock), batch_size=1) if val_every else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, DataLoader(items, batch_size=1), val, ckpt_path=ckpt_path)
    return trainer, module, items


def truth_of(module: SleepModule, items: TimedItems, *, per_epoch: int = ITEMS) -> float:
    # No lookahead in Lightning's fetcher for a sized loader: the second step starts with item 1's
    # fetch.
    epochs = [
        (e * per_epoch + 1, (e + 1) * per_epoch, end) for e, end in enumerate(module.epoch_ends)
    ]
    return true_stall(items.fetches, epochs, module.validations)


def check(cb: StallscopeCallback, truth: float, *, steps: int) -> dict:
    d = cb.to_dict()
    assert_stall_near_truth(d, truth, steps=steps, framework="lightning", tolerance=TOLERANCE)
    return d


@pytest.mark.parametrize("order", ["busy-after", "busy-before"])
def test_another_busy_callback_is_compute_in_either_order(order):
    clock = FakeClock()
    cb = callback(clock)
    busy = BusyCallback(clock)
    _, module, items = fit(clock, [cb, busy] if order == "busy-after" else [busy, cb])
    truth = truth_of(module, items)
    assert truth == pytest.approx(FETCH_S / (FETCH_S + STEP_S + 0.01))  # the scenario
    d = check(cb, truth, steps=ITEMS - 1)
    # the busy callback's 10 ms is in compute, every step
    assert d["compute_ms"]["mean"] == pytest.approx((STEP_S + 0.01) * 1000, abs=0.01)
    assert d["data_ms"]["max"] == pytest.approx(FETCH_S * 1000, abs=0.01)


def test_validation_inside_the_epoch_is_neither_data_nor_compute():
    clock = FakeClock()
    cb = callback(clock)
    _, module, items = fit(clock, [cb, BusyCallback(clock)], val_every=5)
    assert len(module.validations) >= 3
    d = check(cb, truth_of(module, items), steps=ITEMS - 1)
    # no validation run (3 fetches and steps: 18 ms) counted as a wait or as compute
    assert d["data_ms"]["max"] == pytest.approx(FETCH_S * 1000, abs=0.01)
    assert d["compute_ms"]["max"] == pytest.approx((STEP_S + 0.01) * 1000, abs=0.01)


def test_gradient_accumulation():
    clock = FakeClock()
    cb = callback(clock)
    _, module, items = fit(clock, [cb], accumulate=2)
    check(cb, truth_of(module, items), steps=ITEMS - 1)


def test_two_epochs_each_with_its_first_batch_apart():
    clock = FakeClock()
    cb = callback(clock, log_metrics=True)
    _, module, items = fit(clock, [cb], epochs=2)
    d = check(cb, truth_of(module, items), steps=2 * (ITEMS - 1))
    assert d["epochs"] == 2 and len(d["epoch_start_s"]) == 2


def test_resumed_mid_epoch_from_a_checkpoint(tmp_path):
    saver = L.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=6, save_top_k=-1)
    clock = FakeClock()
    fit(clock, [callback(clock), saver])
    path = next(tmp_path.glob("*step=6*.ckpt"))
    cb = callback(clock)
    module, items = SleepModule(clock), TimedItems(ITEMS, FETCH_S, clock=clock)
    fit(clock, [cb, BusyCallback(clock)], ckpt_path=str(path), module=module, items=items)
    fetched = len(items.fetches)
    assert (
        0 < fetched < ITEMS and module.epoch_ends
    )  # resumed inside the epoch (no on_train_epoch_start)
    truth = true_stall(items.fetches, [(1, fetched, module.epoch_ends[0])], module.validations)
    check(cb, truth, steps=fetched - 1)


class Stream(IterableDataset):
    """The same timed items as a stream: no length, so Lightning's fetcher prefetches one
    batch ahead."""

    def __init__(self, items: TimedItems) -> None:
        self.items = items

    def __iter__(self):
        for index in range(len(self.items)):
            yield self.items[index]


def test_unsized_stream_where_lightning_prefetches_one_batch_ahead():
    clock = FakeClock()
    cb = callback(clock)
    items, module = TimedItems(ITEMS, FETCH_S, clock=clock), SleepModule(clock)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[cb, BusyCallback(clock)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, DataLoader(Stream(items), batch_size=1))
    # The blocking next() of a step fetches the batch after it: the second step starts with item 2's
    # fetch.
    epochs = [(e * ITEMS + 2, (e + 1) * ITEMS, end) for e, end in enumerate(module.epoch_ends)]
    d = cb.to_dict()
    assert d["epochs"] == 2
    # Every batch is one step: the prefetch joins the first step's wait, the stream's end closes the
    # last one's.
    assert_stall_near_truth(
        d,
        true_stall(items.fetches, epochs),
        steps=2 * (ITEMS - 1),
        framework="lightning (stream)",
        tolerance=TOLERANCE,
    )
    assert d["total_steps"] == 2 * ITEMS


def test_occupancy_is_sampled_from_lightnings_loader_iterator():
    cb = StallscopeCallback(print_summary=False, sample_interval=0.02)
    items = TimedItems(24, FETCH_S)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[cb],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(
            SleepModule(Clock()),
            DataLoader(items, batch_size=1, num_workers=2, multiprocessing_context="fork"),
        )
    d = cb.to_dict()
    assert d["occupancy"] is not None and d["occupancy"]["capacity"] == 4
    assert d["resources"]["n_workers"] == 2
    assert "stallscope train" in cb.summary()

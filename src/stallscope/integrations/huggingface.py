"""Hugging Face ``Trainer`` callback: data stalls timed where the Trainer fetches its batches.

    trainer = Trainer(..., callbacks=[StallscopeTrainerCallback(sync="cuda")])
    trainer.train()

NOTE [where the Hugging Face Trainer waits for data]
    ``Trainer`` builds its loader in ``get_train_dataloader``; accelerate
    wraps it (``DataLoaderShard``, which iterates the DataLoader one batch
    ahead inside a generator), and every epoch the Trainer takes
    ``epoch_iterator = iter(train_dataloader)`` and collects each optimizer
    step's micro-batches with ``self.get_batch_samples(epoch_iterator, n,
    device)``, which calls ``next(epoch_iterator)`` ``n`` times. Those
    ``next()`` calls are where the loop blocks (the lookahead's blocking
    ``next()`` on the DataLoader runs inside them). At ``on_train_begin`` the
    callback finds the Trainer running it (the caller's frames: the callback
    API passes no trainer) and wraps that method on the instance, so each
    ``next()`` is one timed data wait. One step is one micro-batch: with
    gradient accumulation the micro-batches of an optimizer step are fetched
    back to back, then computed. ``max_steps``, several epochs and resumed runs
    (accelerate's ``skip_first_batches`` loader goes through the same method)
    need nothing special. ``Trainer.evaluate`` is wrapped too, so evaluation
    inside training is kept out of both data and compute, as are epoch ends;
    logging, checkpointing and other callbacks count as compute. Both wraps
    are removed at ``on_train_end``.

    If no Trainer with ``get_batch_samples`` is found (another transformers
    version, a custom loop calling the callbacks), the callback falls back to
    hook gaps (``on_step_end`` → next ``on_step_begin``, restarted after
    ``on_log``/``on_save``/``on_evaluate``), which counts other callbacks'
    ``on_step_end`` work as data wait, and says so in the summary.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from ..api import Watch
from ..training.watch import TimedIterator
from ._results import WatchResults

HOOK_GAPS_NOTE = (
    "no Trainer.get_batch_samples to wrap, so data wait is the gap between on_step_end "
    "and the next "
    "on_step_begin: other callbacks' on_step_end work counts as data wait"
)
# Frames between the callback's hook and the Trainer's training loop (CallbackHandler.call_event,
# on_train_begin).
_FRAMES_TO_SEARCH = 8
_MISSING = object()


def _callback_base() -> type:
    try:
        from transformers import TrainerCallback  # noqa: PLC0415 - optional dependency

        return TrainerCallback
    except ImportError:
        return object


def _running_trainer() -> Any:
    """The ``transformers.Trainer`` whose training loop called us, found in the caller's frames
    (else None)."""
    trainer_class = getattr(sys.modules.get("transformers"), "Trainer", None)
    if trainer_class is None:
        return None
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_FRAMES_TO_SEARCH):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, trainer_class):
            return candidate
        frame = frame.f_back
    return None


class StallscopeTrainerCallback(WatchResults, _callback_base()):  # type: ignore[misc]
    """Arguments are those of :func:`stallscope.training.watch`; ``summary()``/``to_dict()`` after
    training."""

    def __init__(self, *, print_summary: bool = True, **watch_options: Any) -> None:
        self.watch = Watch(None, **watch_options)
        self.print_summary = print_summary
        self.result: dict[str, Any] | None = None
        self._in_epoch = False
        self._trainer: Any = None  # the Trainer whose methods we wrapped (None: hook gaps)
        self._saved: dict[str, Any] = {}
        self._timed: TimedIterator | None = None

    # -- wrapping the Trainer's fetch (NOTE [where the Hugging Face Trainer waits for data]) ----
    def _attach(self, trainer: Any) -> None:
        if trainer is None or not callable(getattr(trainer, "get_batch_samples", None)):
            self.watch.timing = {"method": "hook-gaps", "note": HOOK_GAPS_NOTE}
            return
        get_batch_samples, evaluate = trainer.get_batch_samples, trainer.evaluate
        watch = self.watch

        def timed_get_batch_samples(epoch_iterator: Any, *args: Any, **kwargs: Any) -> Any:
            return get_batch_samples(self._timed_iterator(epoch_iterator), *args, **kwargs)

        def paused_evaluate(*args: Any, **kwargs: Any) -> Any:
            watch.pause()  # the next fetch starts the next step
            return evaluate(*args, **kwargs)

        self._saved = {
            name: trainer.__dict__.get(name, _MISSING) for name in ("get_batch_samples", "evaluate")
        }
        trainer.get_batch_samples = timed_get_batch_samples
        trainer.evaluate = paused_evaluate
        self._trainer = trainer
        watch.timing = {"method": "fetch", "note": None}

    def _timed_iterator(self, epoch_iterator: Any) -> TimedIterator:
        # One wrapper per epoch iterator (observed once), not one per optimizer step.
        if self._timed is None or self._timed._inner is not epoch_iterator:
            self._timed = self.watch.timed(epoch_iterator)
        return self._timed

    def _detach(self) -> None:
        trainer, self._trainer = self._trainer, None
        self._timed = None
        if trainer is None:
            return
        for name, previous in self._saved.items():
            if previous is _MISSING:
                trainer.__dict__.pop(name, None)
            else:
                setattr(trainer, name, previous)

    @property
    def _hook_gaps(self) -> bool:
        return self._trainer is None

    # -- Trainer events ------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._trainer is None:
            self._attach(_running_trainer())

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._in_epoch = True
        self.watch.epoch_start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._hook_gaps:
            self.watch.data_end()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._hook_gaps:
            self.watch.data_start()

    def _restart_wait(self) -> None:
        if self._in_epoch and self._hook_gaps:
            self.watch.cancel_wait()
            self.watch.data_start()

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._restart_wait()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._restart_wait()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._restart_wait()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._in_epoch = False
        self.watch.pause()
        self._timed = None  # do not keep the finished epoch's iterator (and its workers) alive

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._training_ended(
            int(getattr(args, "world_size", 1) or 1), getattr(state, "is_world_process_zero", True)
        )

    def __getattr__(self, name: str) -> Any:
        # Without transformers' base class, answer every other Trainer event with a no-op.
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

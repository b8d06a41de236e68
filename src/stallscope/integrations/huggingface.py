"""Hugging Face ``Trainer`` callback: data stalls per optimizer step.

The Trainer fetches a step's batches (all gradient-accumulation micro-batches)
before ``on_step_begin`` and finishes the optimizer step before
``on_step_end``; logging, saving and evaluation run right after
``on_step_end`` and the next fetch only after them. So: ``on_step_end`` →
``on_step_begin`` is the data wait, restarted after ``on_log`` / ``on_save`` /
``on_evaluate`` so that their work is not counted; ``on_step_begin`` →
``on_step_end`` is compute. One "step" here is one optimizer step.

    trainer = Trainer(..., callbacks=[StallscopeTrainerCallback(sync="cuda")])
"""

from __future__ import annotations

from typing import Any

from ..training.watch import Watch


def _callback_base() -> type:
    try:
        from transformers import TrainerCallback  # noqa: PLC0415 - optional dependency

        return TrainerCallback
    except ImportError:
        return object


class StallscopeTrainerCallback(_callback_base()):  # type: ignore[misc]
    """Arguments are those of :func:`stallscope.training.watch`."""

    def __init__(self, *, print_summary: bool = True, **watch_options: Any) -> None:
        self.watch = Watch(None, **watch_options)
        self.print_summary = print_summary
        self.result: dict[str, Any] | None = None
        self._in_epoch = False

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._in_epoch = True
        self.watch.epoch_start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.watch.data_end()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.watch.data_start()

    def _restart_wait(self) -> None:
        if self._in_epoch:
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
        self.watch.cancel_wait()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.watch.cancel_wait()
        self.watch.close()
        world_size = int(getattr(args, "world_size", 1) or 1)
        self.result = self.watch.gather() if world_size > 1 else self.watch.to_dict()
        if self.print_summary and getattr(state, "is_world_process_zero", True):
            print(self.watch.summary())

    def __getattr__(self, name: str) -> Any:
        # Without transformers' base class, answer every other Trainer event with a no-op.
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def summary(self) -> str:
        return self.watch.summary()

    def to_dict(self) -> dict[str, Any]:
        return self.result if self.result is not None else self.watch.to_dict()

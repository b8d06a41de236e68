"""PyTorch Lightning callback: data stalls in ``Trainer.fit`` without touching the loop.

Lightning fetches the batch before ``on_train_batch_start`` and runs the
step until ``on_train_batch_end``, so the gap between one batch's end and the
next batch's start is the data wait (Lightning's fetcher also pre-fetches one
batch ahead: the ``next()`` it blocks in happens inside that gap too), and
start → end is compute. Validation inside an epoch and epoch ends are kept
out of the wait. With ``sync="cuda"`` the device is synchronised at each
batch end, so compute includes the GPU work.

Prefetch-buffer occupancy is not sampled here: Lightning owns the iterator.

    from .lightning import StallscopeCallback
    cb = StallscopeCallback(log_every=100, sync="cuda")
    trainer = L.Trainer(callbacks=[cb]); trainer.fit(model, datamodule)
    print(cb.summary())
"""

from __future__ import annotations

from typing import Any

from ..training.watch import Watch


def _callback_base() -> type:
    """Lightning's Callback class when Lightning is installed, else ``object`` (duck-typed hooks)."""
    try:
        from lightning.pytorch import Callback  # noqa: PLC0415 - optional dependency

        return Callback
    except ImportError:
        pass
    try:
        from pytorch_lightning import Callback  # noqa: PLC0415 - optional dependency

        return Callback
    except ImportError:
        return object


class StallscopeCallback(_callback_base()):  # type: ignore[misc]
    """Records data wait vs compute per training batch; ``summary()``/``to_dict()`` afterwards.

    Arguments are those of :func:`stallscope.training.watch` (``log_every``, ``sync``,
    ``sample_resources``, ``jsonl``, ``csv``, ``tensorboard``, ``name``, ...).
    ``log_metrics=True`` logs the epoch's stall fraction through
    ``pl_module.log`` as ``stallscope/stall_fraction``.
    """

    def __init__(self, *, log_metrics: bool = False, print_summary: bool = True, **watch_options: Any) -> None:
        super().__init__()
        self.watch = Watch(None, **watch_options)
        self.log_metrics = log_metrics
        self.print_summary = print_summary
        self.result: dict[str, Any] | None = None
        self._in_epoch = False
        self._epoch_first_step = 0

    # -- hooks (Lightning's names and signatures) ----------------------------------------
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._in_epoch = True
        self._epoch_first_step = self.watch.steps
        self.watch.epoch_start()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.watch.data_end()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.watch.data_start()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self._in_epoch:
            self.watch.cancel_wait()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._in_epoch:
            self.watch.data_start()  # training resumes: the next fetch starts now

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._in_epoch = False
        self.watch.cancel_wait()
        if self.log_metrics and pl_module is not None:
            # The epoch's first batch (start-up) stays out, as in the steady-state figures.
            stall = self.watch.stall_between(self._epoch_first_step + 1)
            if stall is not None:
                pl_module.log("stallscope/stall_fraction", stall)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.watch.cancel_wait()
        self.watch.close()
        world_size = int(getattr(trainer, "world_size", 1) or 1)
        self.result = self.watch.gather() if world_size > 1 else self.watch.to_dict()
        if self.print_summary and getattr(trainer, "is_global_zero", True):
            print(self.summary())

    # -- results ---------------------------------------------------------------------------
    def summary(self) -> str:
        return self.watch.summary()

    def to_dict(self) -> dict[str, Any]:
        return self.result if self.result is not None else self.watch.to_dict()

"""PyTorch Lightning callback: data stalls in ``Trainer.fit``, timed where the fit loop fetches.

    from stallscope.integrations.lightning import StallscopeCallback
    cb = StallscopeCallback(log_every=100, sync="cuda")
    trainer = L.Trainer(callbacks=[cb]); trainer.fit(model, datamodule)
    print(cb.summary())

NOTE [where Lightning waits for data]
    Lightning 2.x fetches training batches through a data fetcher
    (``trainer.fit_loop._data_fetcher``, a ``_PrefetchDataFetcher``): every
    ``next()`` on it calls ``next()`` on the iterator of the fit loop's
    ``CombinedLoader``, which calls ``next()`` on the DataLoader's iterator.
    That call is where the loop blocks (with an unsized loader the fetcher
    runs one batch ahead, and the blocking ``next()`` is the refill inside
    the same call). The callback replaces the fetcher's combined loader by a
    thin stand-in whose ``iter()`` returns a :class:`TimedIterator`, and wraps
    the iterator already created for the first epoch (``setup_data`` creates
    it before any callback hook runs). So the data wait is exactly the time
    inside that ``next()``: other callbacks (before or after this one),
    logging, checkpointing and optimizer work are compute; validation runs
    and epoch ends are kept out of both (``on_validation_start`` and
    ``on_train_epoch_end`` close the step; the next fetch starts the next).
    Each epoch's first batch is timed from ``on_train_epoch_start``; for the
    first epoch the DataLoader's workers were started before that hook.

    With an unsized loader (an IterableDataset) the fetcher runs one batch
    ahead: it prefetches at the epoch's start (inside ``iter()``, after
    ``on_train_epoch_start``), so that fetch is part of the first step's
    wait, and the loop's last step follows the refill that ends the stream,
    so that StopIteration closes a wait (:class:`TimedIterator`'s ``ahead``
    and ``stop_ends_wait``).

    When a Lightning version lays its fit loop out differently (no
    ``fit_loop._data_fetcher._combined_loader``), the callback falls back to
    hook gaps (``on_train_batch_end`` → next ``on_train_batch_start``), which
    also count other callbacks' per-batch work as data wait, and says so in
    the summary (``timing`` in the record).
"""

from __future__ import annotations

from typing import Any

from ..api import Watch
from ..training.watch import TimedIterator
from ._results import WatchResults

HOOK_GAPS_NOTE = (
    "this Lightning's fit loop could not be wrapped, so data wait is the gap between "
    "on_train_batch_end "
    "and the next on_train_batch_start: other callbacks' per-batch work counts as data wait"
)


def _callback_base() -> type:
    """Lightning's Callback class when Lightning is installed, else ``object`` (duck-typed
    hooks)."""
    try:
        from lightning.pytorch import Callback  # noqa: PLC0415 - optional dependency

        return Callback
    except ImportError:
        pass
    try:
        from pytorch_lightning import Callback as LegacyCallback  # noqa: PLC0415 - optional

        return LegacyCallback
    except ImportError:
        return object


class _TimedLoader:
    """Stands in for the fit loop's CombinedLoader inside the data fetcher: each ``iter()`` is
    timed."""

    def __init__(self, loader: Any, watch: Watch, fetcher: Any) -> None:
        self.loader, self._watch, self._fetcher = loader, watch, fetcher

    def __iter__(self) -> TimedIterator:
        # The fetcher calls iter() at the epoch's start, then prefetches from it when the loader has
        # no length.
        ahead = _prefetched(self._fetcher, self.loader)
        return self._watch.timed(iter(self.loader), ahead=ahead, stop_ends_wait=ahead > 0)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def _prefetched(fetcher: Any, loader: Any) -> int:
    """Batches Lightning's fetcher takes ahead of the loop: ``prefetch_batches``, only for an
    unsized loader."""
    try:
        len(loader)
        return 0
    except (TypeError, NotImplementedError):
        return int(getattr(fetcher, "prefetch_batches", 0) or 0)


class StallscopeCallback(WatchResults, _callback_base()):  # type: ignore[misc]
    """Records data wait vs compute per training batch; ``summary()``/``to_dict()`` afterwards.

    Arguments are those of :func:`stallscope.training.watch` (``log_every``, ``sync``,
    ``sample_resources``, ``jsonl``, ``csv``, ``tensorboard``, ``name``, ...).
    ``log_metrics=True`` logs the epoch's stall fraction through
    ``pl_module.log`` as ``stallscope/stall_fraction``.
    """

    def __init__(
        self, *, log_metrics: bool = False, print_summary: bool = True, **watch_options: Any
    ) -> None:
        super().__init__()
        self.watch = Watch(None, **watch_options)
        self.log_metrics = log_metrics
        self.print_summary = print_summary
        self.result: dict[str, Any] | None = None
        self._in_epoch = False
        self._epoch_first_step = 0
        self._fetcher: Any = None  # the data fetcher whose loader we wrapped (None: hook gaps)

    # -- wrapping the fit loop's fetch (NOTE [where Lightning waits for data]) --------------
    def _attach(self, trainer: Any) -> None:
        fetcher: Any = getattr(getattr(trainer, "fit_loop", None), "_data_fetcher", None)
        loader = getattr(fetcher, "_combined_loader", None)
        if loader is None or not hasattr(fetcher, "iterator"):
            if self._fetcher is None:
                self.watch.timing = {"method": "hook-gaps", "note": HOOK_GAPS_NOTE}
            return
        if fetcher is not self._fetcher:
            self._detach()  # the fit loop built a new fetcher (reloaded dataloaders)
        if not isinstance(loader, _TimedLoader):
            fetcher._combined_loader = _TimedLoader(loader, self.watch, fetcher)
        if fetcher.iterator is not None:
            # Created in setup_data, before any hook: the first epoch's. Its prefetch (unsized
            # loader) already happened, untimed: the loop's fetches follow.
            ahead = _prefetched(fetcher, fetcher._combined_loader.loader)
            fetcher.iterator = self.watch.timed(fetcher.iterator, stop_ends_wait=ahead > 0)
            self.watch.observe(fetcher.iterator)
        self._fetcher = fetcher
        self.watch.timing = {"method": "fetch", "note": None}

    def _detach(self) -> None:
        fetcher, self._fetcher = self._fetcher, None
        loader = getattr(fetcher, "_combined_loader", None)
        if isinstance(loader, _TimedLoader):
            fetcher._combined_loader = loader.loader
        iterator = getattr(fetcher, "iterator", None)
        if isinstance(iterator, TimedIterator):
            fetcher.iterator = iterator._inner

    @property
    def _hook_gaps(self) -> bool:
        return self._fetcher is None

    # -- hooks (Lightning's names and signatures) ----------------------------------------
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._attach(trainer)  # also when resuming mid-epoch, where on_train_epoch_start is skipped

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._attach(trainer)
        self._in_epoch = True
        self._epoch_first_step = self.watch.steps
        self.watch.epoch_start()

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._hook_gaps:
            self.watch.data_end()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._hook_gaps:
            self.watch.data_start()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self._in_epoch:
            self.watch.pause()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._in_epoch and self._hook_gaps:
            self.watch.data_start()  # training resumes: the next fetch starts now

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._in_epoch = False
        self.watch.pause()
        if self.log_metrics and pl_module is not None:
            # The epoch's first batch (start-up) stays out, as in the steady-state figures.
            stall = self.watch.stall_between(self._epoch_first_step + 1)
            if stall is not None:
                pl_module.log("stallscope/stall_fraction", stall)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._training_ended(
            int(getattr(trainer, "world_size", 1) or 1), getattr(trainer, "is_global_zero", True)
        )

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._detach()
        self.watch.close()

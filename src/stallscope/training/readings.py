"""What a :class:`~stallscope.training.watch.Watch` shows of its loader and of what it recorded.

:class:`WatchReadings` is the part of a watch that reads and never records: it hands ``len()``
and unknown attributes to the wrapped loader, and gives sinks (``sinks.StepSource``), the
integrations and the profile the step sums, stall fractions, per-step rows, time windows and
latest resource readings. Nothing here is on the loop's hot path (NOTE [watch hot path] in
watch.py).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from . import gather as ranks
from . import windows as time_windows
from .sampling import BackgroundSampler, Samples
from .steps import StepTimes


class WatchReadings:
    """Reads what a watch recorded; :class:`~stallscope.training.watch.Watch` records it and sets
    every attribute below in its ``__init__``."""

    _loader: Any
    _iterator: Callable[[], Any]
    _steps: StepTimes
    _epoch_starts: list[int]
    _t0: float | None
    _batch_size: int | None
    _resource_windows: time_windows.ResourceWindows
    _samples: Samples
    _sampling: bool
    _inline: Any
    _inline_open: bool
    _sampler: BackgroundSampler | None
    warmup: int
    window_s: float

    # -- delegation -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    @property
    def loader(self) -> Any:
        return self._loader

    @property
    def current_iterator(self) -> Any:
        """The loader iterator of the latest epoch (e.g. to shut its workers down)."""
        return self._iterator()

    @property
    def steps(self) -> int:
        """Steps recorded so far (batches delivered)."""
        return self._steps.steps

    @property
    def _data(self) -> array[float]:
        """Data wait per step (s), derived from the clock readings."""
        return self._steps.data()

    @property
    def _compute(self) -> array[float]:
        """Compute per closed step (s), derived from the clock readings."""
        return self._steps.compute()

    # -- what sinks read (sinks.StepSource) --------------------------------------------------
    @property
    def closed_steps(self) -> int:
        return self._steps.closed

    def window(self, start: int, end: int) -> tuple[float, float]:
        """Sums of data wait and compute (s) over the closed steps ``[start, end)``."""
        return self._steps.sums(start, end)

    def stall_between(self, start: int, end: int | None = None) -> float | None:
        """Stall fraction of the closed steps in ``[start, end)`` (None when they took no time)."""
        closed = self.closed_steps
        end = closed if end is None else min(end, closed)
        data, compute = self.window(start, end)
        return data / (data + compute) if data + compute > 0 else None

    def step_rows(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """Closed steps as dicts: step, epoch, t_s (since the first request), data_ms, compute_ms,
        first."""
        return self._steps.rows(start, end, epoch_starts=self._epoch_starts, origin=self._t0 or 0.0)

    def closed_windows(self, upto: int, *, final: bool) -> list[dict[str, Any]]:
        """Time windows of the steps from ``upto`` that are over (with ``final``, the open one too);
        see windows.py."""
        if self._t0 is None:
            return []
        end = self._steps.closed_windows_end(
            upto, origin=self._t0, window_s=self.window_s, final=final
        )
        return self._windows(upto, end) if end > upto else []

    def _windows(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        if self._t0 is None:
            return []
        windows = time_windows.step_windows(
            self._steps.requested,
            self._data,
            self._compute,
            epoch_starts=self._epoch_starts,
            warmup=self.warmup,
            origin=self._t0,
            window_s=self.window_s,
            batch_size=self._batch_size,
            start=start,
            end=end,
        )
        return time_windows.with_resources(windows, self._resource_windows)

    @property
    def rank(self) -> int | None:
        """This process's rank under torchrun (None outside a distributed job)."""
        return ranks.current_rank()

    def latest_buffer(self) -> tuple[int, int] | None:
        return self._samples.latest_buffer()

    def latest_gpu_util(self) -> float | None:
        return self._samples.latest_gpu_util()

    def latest_cpu(self) -> tuple[float, float] | None:
        if not self._sampling:
            return None
        if self._inline_open:
            inline: tuple[float, float] | None = self._inline.latest_cpu()
            return inline
        return self._sampler.latest_cpu() if self._sampler is not None else None

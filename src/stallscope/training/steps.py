"""The per-step record of a :class:`~stallscope.training.watch.Watch`: timestamps in, waits and
compute out.

The training loop pays for what is stored per step, so only clock readings
are stored (NOTE [watch hot path] in watch.py): when the loop asked for a
batch (``requested``) and when it got it (``delivered``). A step's compute
runs from its delivery to the loop's next request, so inside an epoch the
next step's request is also this step's end and nothing more is stored.
Where a step ends elsewhere (the last step of an epoch, a ``pause()`` for
validation, every step of the manual API) its end is kept apart, in two
small arrays. The data wait (``delivered - requested``) and the compute
(``end - delivered``) are derived when figures are asked for, once per
step: the derived arrays are kept and extended, never recomputed.

On the hot path ``requested`` is appended when the loop comes back for the
next batch, before the loader delivers it: between the two it holds one
entry more than ``delivered`` (the request in flight), which closes the step
before it. The iteration removes it when the loader has no batch to give
(:meth:`StepTimes.end_run`).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Sequence
from operator import sub
from typing import Any

from .sinks import row
from .windows import window_index


class StepTimes:
    """Per-step clock readings and the data waits and compute derived from them (seconds)."""

    __slots__ = ("requested", "delivered", "_end_steps", "_end_times", "_data", "_compute")

    def __init__(self) -> None:
        self.requested = array(
            "d"
        )  # per step: the clock when the loop asked for its batch (+ one in flight)
        self.delivered = array("d")  # per step: the clock when the batch arrived
        self._end_steps = array(
            "q"
        )  # steps whose compute did not end at the next request, in order ...
        self._end_times = array("d")  # ... and the clock when it did
        self._data = array("d")  # derived: delivered - requested, for every step
        self._compute = array("d")  # derived: end - delivered, for every closed step

    @property
    def steps(self) -> int:
        """Steps recorded (batches delivered)."""
        return len(self.delivered)

    def last_open(self) -> bool:
        """Whether the latest step's compute is still running (the loop has not asked for more
        data)."""
        n = len(self.delivered)
        if n == 0 or len(self.requested) > n:
            return False
        ends = self._end_steps
        return not (ends and ends[-1] == n - 1)

    @property
    def closed(self) -> int:
        """Steps whose compute is over (every step but an open last one)."""
        n = len(self.delivered)
        return n - 1 if self.last_open() else n

    def add(self, requested: float, delivered: float) -> None:
        """One step of the manual API: asked for at ``requested``, delivered at ``delivered``."""
        self.requested.append(requested)
        self.delivered.append(delivered)

    def end_last(self, at: float) -> None:
        """The latest step's compute ended at ``at`` (call only while :meth:`last_open`)."""
        self._end_steps.append(len(self.delivered) - 1)
        self._end_times.append(at)

    def end_run(self, first_step: int) -> bool:
        """The hot path's iteration ended: settle the request in flight, if any.

        A request that got no batch (the epoch's end, or the loader raised)
        ended the step before it, when that step is of this run (from
        ``first_step``). Returns whether the latest step is still open (the
        loop left in the middle of a step: the caller ends it).
        """
        n = len(self.delivered)
        if len(self.requested) > n:
            at = self.requested.pop()
            if n > first_step and self.last_open():
                self.end_last(at)
            return False
        return n > first_step and self.last_open()

    # -- derived, when asked ---------------------------------------------------------------
    def data(self) -> array[float]:
        """The data wait of every step (s); extended in place as steps come."""
        n = len(self.delivered)
        k = len(self._data)
        if k < n:
            self._data.extend(map(sub, self.delivered[k:n], self.requested[k:n]))
        return self._data

    def compute(self) -> array[float]:
        """The compute of every closed step (s); extended in place as steps close."""
        closed = self.closed
        c = len(self._compute)
        if c >= closed:
            return self._compute
        requested, delivered = self.requested, self.delivered
        # Inside an epoch a step ends at the next request ...
        upto = max(c, min(closed, len(requested) - 1))
        values = array("d", map(sub, requested[c + 1 : upto + 1], delivered[c:upto]))
        values.extend([math.nan] * (closed - c - len(values)))
        # ... except the steps that ended elsewhere.
        ends, times = self._end_steps, self._end_times
        for j in range(bisect.bisect_left(ends, c), len(ends)):
            i = ends[j]
            if i >= closed:
                break
            values[i - c] = times[j] - delivered[i]
        self._compute.extend(values)
        return self._compute

    # -- what the sinks and the time windows read --------------------------------------------
    def sums(self, start: int, end: int) -> tuple[float, float]:
        """Sums of data wait and compute (s) over the closed steps ``[start, end)``."""
        return sum(self.data()[start:end]), sum(self.compute()[start:end])

    def rows(
        self, start: int, end: int | None, *, epoch_starts: Sequence[int], origin: float
    ) -> list[dict[str, Any]]:
        """Closed steps ``[start, end)`` as per-step rows (``sinks.row``); ``t_s`` counts from
        ``origin``."""
        data, compute = self.data(), self.compute()
        end = len(compute) if end is None else end
        requested = self.requested
        rows = []
        epoch = max(0, bisect.bisect_right(epoch_starts, start) - 1)
        for i in range(start, end):
            while epoch + 1 < len(epoch_starts) and epoch_starts[epoch + 1] <= i:
                epoch += 1
            first = bool(epoch_starts) and i == epoch_starts[epoch]
            rows.append(row(i, epoch, requested[i] - origin, data[i], compute[i], first))
        return rows

    def closed_windows_end(self, upto: int, *, origin: float, window_s: float, final: bool) -> int:
        """Where the closed steps from ``upto`` whose time windows are over end (``upto`` when
        none).

        With ``final``, every closed step: the open window too.
        """
        closed = self.closed
        if closed <= upto or final:
            return max(upto, closed)
        requested = self.requested
        # Cheap test first: is the latest closed step in a later window than step ``upto``?
        last = window_index(requested[closed - 1], origin, window_s)
        if last == window_index(requested[upto], origin, window_s):
            return upto
        return bisect.bisect_left(requested, origin + last * window_s, upto, closed)

"""The library surface where a probe's result meets its judgement: ``ss.tune`` and ``ss.watch``.

Probes record, analysis judges (docs/architecture.md): ``tuning.tuner`` and ``training.watch``
return measurements and never import ``analysis/`` or ``render/``. What a user calls on their
results to hear what the measurements mean lives here, one layer above both, as thin subclasses:

* :class:`TuneResult` (from :func:`tune`) adds :meth:`~TuneResult.recommendations`;
* :class:`Watch` (``ss.watch`` is the class itself) judges its ``to_dict()`` (verdict, ranks
  compared, memory drift: ``analysis.training.judged_profile``) and adds
  :meth:`~Watch.recommendations`, :meth:`~Watch.advice` and :meth:`~Watch.summary`.

Everything else is the probes' own: the arguments, the measuring, the record sections.
"""

from __future__ import annotations

import functools
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .runtime.processes import safe_from_worker_deaths
from .training import watch as probe_watch
from .tuning import tuner as probe_tuner

if TYPE_CHECKING:
    from .analysis.facts import Recommendation

__all__ = ["TuneResult", "Watch", "tune", "watch"]


class TuneResult(probe_tuner.TuneResult):
    """What ``ss.tune`` found (:class:`stallscope.tuning.tuner.TuneResult`), with its advice."""

    def recommendations(self) -> list[Recommendation]:
        """The advice on this result, as every report gives it: analysis over ``to_dict()``."""
        from .analysis import recommendations

        return recommendations(self.to_dict())


@functools.wraps(probe_tuner.tune)
@safe_from_worker_deaths
def tune(target: Any, **options: Any) -> TuneResult:
    found = probe_tuner.tune(target, **options)
    return TuneResult(**{f.name: getattr(found, f.name) for f in fields(found)})


class Watch(probe_watch.Watch):
    """Wrap ``loader`` to measure data stalls in your own loop: ``for batch in ss.watch(loader):``.

    The probe (:class:`stallscope.training.watch.Watch`) with its figures judged: ``ss.watch``
    is this class.

    Args:
        loader: what the loop iterates (a DataLoader or any iterable of batches); one epoch per
            ``for`` loop.
        log_every: a live line every this many steps (data/compute ms, stall %, buffer, GPU, CPU);
            None: no line.
        sync: ``"cuda"`` (or ``True``, or any callable) synchronises at each step boundary, so
            compute includes the device's work and the data wait is time the device really idled;
            None: no synchronise.
        sample_resources: sample CPU and memory (main process and workers), the GPU (NVML) and the
            prefetch buffer's occupancy while epochs run; False turns all of it off (no thread at
            all).
        jsonl: per-step rows (step, epoch, t_s, data_ms, compute_ms, first) to this JSON-lines file;
            the time windows go next to it (``run.jsonl`` -> ``run.windows.jsonl``) unless
            ``windows_jsonl`` is given.
        csv: the same per-step rows to a CSV file.
        tensorboard: a log directory or a ``SummaryWriter`` (anything with ``add_scalar``) for
            scalars every ``log_every`` steps (50 without it) and per time window.
        name: the watch's name in live lines, scalars, windows and the profile (``"train"``).
        warmup: steps at the start kept out of the steady-state figures (besides each epoch's first
            batch).
        log: where live lines go: a callable taking the line, or a ``logging.Logger``; None: stderr.
        sample_interval: seconds between the background samples of occupancy and GPU.
        resource_interval: seconds between CPU/memory readings (at most a quarter of ``window_s``).
        gpu: a GPU monitor to sample instead of NVML's, or False for none; None: NVML where
            available.
        clock: the clock of every step boundary (``time.perf_counter``; tests pass a fake one).
        window_s: seconds per time window for long runs (stall, step time, CPU and memory per
            window, and the memory drift over them: ``windows`` and ``memory_drift`` in
            ``to_dict()``).
        windows_jsonl: append each closed time window to this JSON-lines file (read back with
            ``stallscope.training.windows.read_windows``).
        batch_size: samples per step for the per-sample rates; None: the loader's ``batch_size``.

    Iterate the watch in place of the loader, then ``w.to_dict()`` (the profile section),
    ``ss.stall_summary(w)`` (text), ``w.gather()`` under torchrun, ``w.close()``.
    """

    def to_dict(
        self, *, timeline: bool = True, context: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The ``profile`` section (the record schema) with what analysis concludes from it: the
        verdict, the ranks compared, the memory drift (``analysis.training.judged_profile``)."""
        from .analysis.training import judged_profile

        return judged_profile(super().to_dict(timeline=timeline, context=context))

    def recommendations(self) -> list[Recommendation]:
        """What the stall figures call for, as ``stallscope profile`` reports it."""
        from .analysis import recommendations

        return recommendations(self.to_dict(timeline=False))

    def advice(self) -> str | None:
        """The knob to turn next, in one sentence with the numbers behind it."""
        from .analysis.training import profile_advice

        return profile_advice(self.to_dict(timeline=False))

    def summary(self) -> str:
        """The text of ``ss.stall_summary(w)``: verdict, stall fraction, what-if, buffer, GPU and
        CPU."""
        from .render.console_profile import stall_summary

        return stall_summary(self.to_dict())


# ``ss.watch(loader, ...)`` builds the judged watch: the constructor's signature and the options
# documented above, with nothing in between.
watch = Watch

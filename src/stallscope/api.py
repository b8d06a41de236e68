"""The library surface where a probe's result meets its judgement: ``ss.tune`` and ``ss.watch``.

Probes record, analysis judges (docs/architecture.md): ``tuning.tuner`` and ``training.watch``
return measurements and never import ``analysis/`` or ``render/``. What a user calls on their
results to hear what the measurements mean lives here, one layer above both, as thin subclasses:

* :class:`TuneResult` (from :func:`tune`) adds :meth:`~TuneResult.recommendations`;
* :class:`Watch` (from :func:`watch`) judges its ``to_dict()`` (verdict, ranks compared, memory
  drift: ``analysis.training.judged_profile``) and adds :meth:`~Watch.recommendations`,
  :meth:`~Watch.advice` and :meth:`~Watch.summary`.

Everything else is the probes' own: the arguments, the measuring, the record sections.
"""

from __future__ import annotations

import functools
from dataclasses import fields
from typing import TYPE_CHECKING, Any

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
def tune(target: Any, **options: Any) -> TuneResult:
    found = probe_tuner.tune(target, **options)
    return TuneResult(**{f.name: getattr(found, f.name) for f in fields(found)})


class Watch(probe_watch.Watch):
    """``ss.watch(loader)`` (:class:`stallscope.training.watch.Watch`), its figures judged."""

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


@functools.wraps(probe_watch.watch)
def watch(loader: Any, **options: Any) -> Watch:
    return Watch(loader, **options)

"""The state of one tuning run and the bookkeeping every phase of the search shares.

:class:`SearchState` holds what the search has learnt so far (the scan's trials, the notes, what
was skipped) and the helpers each phase calls to measure a config within the time and memory
budgets; :class:`~.search.Search` adds the phases themselves (NOTE [tuning strategy] in
search.py). Nothing here starts a worker: measurements go through the evaluator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..config import LoaderConfig
from .race import Race
from .space import MB, MemoryBudget, SearchSettings, SearchSpace
from .trial import Evaluator, Trial, overhead_fit

# The noise threshold for a gain never exceeds this: 10%, above which the search would sooner
# stop early on noise than spend measurements telling it apart.
MAX_SIG = 0.10


class SearchState:
    """What a tuning run knows so far, and the measuring helpers its phases share.

    :class:`~.search.Search` sets every attribute below in its ``__init__``.
    """

    ev: Evaluator
    space: SearchSpace
    memory: MemoryBudget
    settings: SearchSettings
    on_trial: Callable[[Trial], None] | None
    trials: list[Trial]
    notes: list[str]
    skipped: list[dict[str, str]]
    race: Race
    _scan: dict[LoaderConfig, Trial]
    unresolved: set[LoaderConfig]
    _template: LoaderConfig

    def workers(self, n: int, **changes: Any) -> LoaderConfig:
        return self._template.replace(num_workers=n, **changes)

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _skip(self, config: LoaderConfig, why: str) -> None:
        label = config.label()
        if not any(s["label"] == label for s in self.skipped):
            self.skipped.append({"label": label, "why": why})

    def _sig(self, *trials: Trial) -> float:
        """The gain that counts as real: the floor, or twice the combined window noise (capped:
        when unsure, one more step up costs a measurement, stopping early can cost the optimum)."""
        return max(self.settings.min_gain, min(self._window_noise(*trials), MAX_SIG))

    @staticmethod
    def _window_noise(*trials: Trial) -> float:
        """Twice the combined window noise of single measurements, uncapped."""
        return 2 * math.sqrt(sum((t.rel_se or 0.0) ** 2 for t in trials))

    def too_noisy(self, cheaper: Trial, dearer: Trial, gain: float) -> bool:
        """Whether the dearer config's gain over the cheaper one, large enough to count as real by
        :meth:`_sig` (capped at ``MAX_SIG``), is still within the measurements' noise: single
        measurements cannot tell the two apart, so the cheaper is kept (said in a note) rather than
        paid for in processes and memory."""
        noise = self._window_noise(cheaper, dearer)
        if noise <= MAX_SIG or gain >= 1 + noise or gain < 1 + self._sig(cheaper, dearer):
            return False  # quiet enough, beyond the noise, or no gain that would count anyway
        self._note(
            f"too noisy to tell {dearer.config.label()} from {cheaper.config.label()}: "
            f"{gain - 1:+.0%} is within the measurements' noise (±{noise:.0%}), so the cheaper "
            f"{cheaper.config.label()} is kept"
        )
        return True

    def rate(self, config: LoaderConfig) -> float:
        raced = self.race.log.median(config)
        if raced is not None:
            return raced
        trial = self._scan.get(config)
        return trial.samples_per_s if trial is not None and trial.ok else 0.0

    def estimate_cost(self, config: LoaderConfig, window_s: float) -> float:
        """Seconds a measurement of ``config`` will take, from what earlier ones took.

        Overhead (start-up, warm-up, shutdown) is fitted as ``a + b × workers``
        over past trials; the window stretches to ``min_batches`` batches at
        the rate of the nearest measured config with no more workers.
        """
        a, b = overhead_fit(self.trials)
        rate = self._rate_guess(config)
        window = window_s
        if rate > 0:
            window = max(window_s, self.settings.min_batches * config.batch_size / rate)
        return window + a + b * config.num_workers

    def _rate_guess(self, config: LoaderConfig) -> float:
        known = self.rate(config)
        if known > 0:
            return known
        below = [
            t.samples_per_s
            for c, t in self._scan.items()
            if t.ok and c.num_workers <= config.num_workers
        ]
        return max(below) if below else 0.0

    def affordable(self, seconds: float, share: float = 1.0) -> bool:
        return self.ev.elapsed() + seconds <= self.settings.budget_s * share

    def worker_cap(self, prefetch_factor: int = 2) -> int:
        return max(0, min(self.space.max_workers, self.memory.max_workers(prefetch_factor)))

    def measure(
        self, config: LoaderConfig, phase: str, *, share: float = 1.0, force: bool = False
    ) -> Trial | None:
        """Measure once (or reuse the scan result); None when the budget or memory says no."""
        if config in self._scan:
            return self._scan[config]
        if not force and not self.memory.fits(config):
            self._note(
                f"skipped {config.label()}: needs about {self.memory.need(config) / MB:.0f} MB, "
                f"over the {self.memory.budget_bytes / MB:.0f} MB memory budget"
            )
            self._skip(config, "not measured: its estimated memory exceeds the memory budget")
            return None
        window = self.settings.scan_window_s
        if not force and not self.affordable(self.estimate_cost(config, window), share):
            self._note(f"time budget: did not measure {config.label()} in the {phase} phase")
            self._skip(config, f"not measured: the time budget ran out in the {phase} phase")
            return None
        trial = self.ev.measure(config, window_s=window, phase=phase)
        self._record(trial)
        self._scan[config] = trial
        return trial

    def _record(self, trial: Trial) -> None:
        self.trials.append(trial)
        config = trial.config
        if config.num_workers > 0:
            total = trial.workers_bytes
            if total is None and trial.worker_bytes is not None:
                total = trial.worker_bytes * config.num_workers
            self.memory.observe_config(config, total)
            if self.memory.over(config):
                self._note(
                    f"{config.label()} measured {self.memory.need(config) / MB:,.0f} MB (workers "
                    f"and in-flight batches), over the {self.memory.budget_bytes / MB:,.0f} MB "
                    "memory budget: it is not raced, picked or recommended"
                )
                self._skip(config, "its measured memory exceeds the memory budget")
        if trial.error:
            self._note(f"{trial.config.label()} failed: {trial.error}")
        if self.on_trial is not None:
            self.on_trial(trial)

    def _scanned_worker_counts(self, *, within_budget: bool = True) -> dict[int, float]:
        """Rate per worker count among plain worker configs (the template's other knobs); only
        those within the memory budget unless ``within_budget`` is False."""
        out: dict[int, float] = {}
        for config, trial in self._scan.items():
            if within_budget and self.memory.over(config):
                continue
            if trial.ok and config == self.workers(config.num_workers):
                out[config.num_workers] = trial.samples_per_s
        return out

    def usable(self) -> dict[LoaderConfig, Trial]:
        """The scan's successful trials within the memory budget: the ones that may race or be
        picked (NOTE [memory budget])."""
        return {
            c: t
            for c, t in self._scan.items()
            if t.ok and not self.memory.over(c) and c not in self.unresolved
        }

    def best_scanned(
        self, predicate: Callable[[LoaderConfig], bool] = lambda c: True
    ) -> LoaderConfig | None:
        found = [(t.samples_per_s, c) for c, t in self.usable().items() if predicate(c)]
        if not found:
            return None
        return max(found, key=lambda pair: pair[0])[1]

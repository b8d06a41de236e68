"""``ss.check``: run the probes within a time budget, then the rules.

Order matters: the picklability probe runs first (it decides whether worker
probes can use spawn/forkserver), then the sample-health probe (its own pool:
it survives hangs and names the bad indices), then the DataLoader-based RNG and
memory probes, which leave out the indices the health probe found broken so
they do not stall on them. Every probe gets a deadline carved from the total
budget; every wait on a worker is bounded (NOTE [worker shutdown] in
``runtime/processes.py``).

NOTE [check coverage]
A sampled check used to fetch a fixed 512 indices, a quarter of a 2,000-item
dataset in 4 s of a 60 s budget, and missed the three slow samples in it. Now
the sample-health probe fetches a pilot (the two ends and indices spread over
the range), measures how many items per second its pool fetches, and then
plans: every remaining index if they fit in its share of the budget, else as
many as fit, one per stratum of the index range, in random order so a run cut
short stays spread out. The memory probe prefers indices the health probe did
not reach; its fetches are timed too and count toward the coverage, which the
report always states ("n of N indices").
"""

from __future__ import annotations

import multiprocessing
import random
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError, describe_exception
from ..runtime.processes import default_start_method, no_orphans, safe_from_worker_deaths
from . import fork_control
from .findings import (
    DEFAULT_BUDGET_S,
    DEFAULT_TIMEOUT_S,
    PROBES_FOR,
    codes_of_probe,
    select_codes,
)
from .result import CheckResult
from .rules import analyse, slow_candidates
from .sampling import bad_indices, memory_pool, pilot_order, plan_order
from .util import health_blocked, machinery_error, probe_error_texts

SAMPLE_SIZE = 512  # items of an iterable dataset fetched in sampled mode
# Map-style datasets: the sample-health probe fetches a stratified pilot, measures its pace,
# then every index when they all fit in its share of the budget, else as many as fit,
# stratified across the index range (NOTE [check coverage]).
PILOT_SIZE = 64
PLAN_SAFETY = 0.8  # plan for this share of the time left (retimes and stragglers need the rest)
# sampled mode: the memory probe's indices are sized to take about this long...
MEMORY_SECONDS = 4.0
MEMORY_MAX_SECONDS = 10.0  # ...and it stops after its passes, or after this on a slower pace
MEMORY_PASSES = 3  # passes over the memory probe's indices: growth that stops after the first shows
MEMORY_MIN_POOL = 32
# without the health probe's pace (--only memory-growth); time still bounds it
MEMORY_UNPACED_POOL = 1024
MEMORY_MAX_POOL = 20_000
MEMORY_ITERABLE_SAMPLES = 2000
RNG_OTHER_INDICES = 4
RNG_MAX_REPEATS = 6
# Seconds a fresh worker may take before its first fetch (spawn re-imports torch).
STARTUP_S = {"fork": 5.0, "spawn": 30.0, "forkserver": 30.0}


@safe_from_worker_deaths
def check(
    target: Any,
    *,
    batch_size: int | None = None,
    collate: Any = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    budget: float | None = DEFAULT_BUDGET_S,
    full: bool = False,
    num_workers: int | None = None,
    start_method: str | None = None,
    only: Iterable[str] | None = None,
    skip: Iterable[str] | None = None,
    seed: int = 0,
    shm_free_bytes: int | None = None,
    progress: Callable[[str, int | None, int | None], None] | None = None,
    on_update: Callable[[CheckResult], None] | None = None,
) -> CheckResult:
    """Worker-safety, memory and sample-health checks (SPEC §4) on a pipeline.

    ``target`` is anything :func:`stallscope.load_target` accepts (a TARGET
    string, a Dataset, a DataLoader, a dict, a zero-argument factory) or a
    ``Pipeline``. ``timeout`` bounds each sample's fetch, ``budget`` the whole
    call (None: no limit besides the per-sample timeouts). Sampled by default
    (``SAMPLE_SIZE`` indices); ``full=True`` fetches every index.
    ``num_workers`` (default ``min(2, usable cores)``) and ``start_method``
    (default: the loader's own, else the platform's) shape the worker probes.
    ``only``/``skip`` select finding codes. ``shm_free_bytes`` replaces the
    measured free space of /dev/shm (to ask "would this fit in a 64 MB
    container?"). ``progress(stage, done, total)`` and ``on_update(result)``
    report as the probes go; the result so far is complete at every update.
    """
    from ..runtime.host import usable_cores
    from ..target import Pipeline, load_target

    if timeout is None or timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {timeout}.")
    if budget is not None and budget <= 0:
        raise UsageError(f"--budget must be a positive number of seconds, not {budget}.")
    if num_workers is not None and num_workers < 1:
        raise UsageError(
            f"--num-workers must be at least 1 for the worker probes, not {num_workers}."
        )
    if start_method is not None and start_method not in multiprocessing.get_all_start_methods():
        raise UsageError(
            f"start method {start_method!r} is not available here; choose one of "
            f"{', '.join(multiprocessing.get_all_start_methods())}."
        )
    codes = select_codes(only, skip)
    pipeline = (
        target
        if isinstance(target, Pipeline)
        else load_target(target, batch_size=batch_size, collate=collate)
    )
    if not pipeline.has_dataset:  # a graph, a pool, no batching: NOTE [pipeline checks]
        from .pipeline_checks import check_pipeline

        return check_pipeline(
            pipeline,
            codes=codes,
            timeout=float(timeout),
            budget=float(budget) if budget is not None else 120.0,
            progress=progress,
            on_update=on_update,
        )
    length = pipeline.length()
    if length == 0:
        raise UsageError("the dataset is empty (len(dataset) == 0): there is nothing to check.")
    workers = num_workers or min(2, usable_cores())
    method = start_method or pipeline.baseline.multiprocessing_context or default_start_method()
    with no_orphans(), tempfile.TemporaryDirectory(prefix="stallscope-check-") as tmp:
        run = CheckRun(
            pipeline,
            codes=codes,
            timeout=float(timeout),
            budget=float(budget) if budget is not None else float("inf"),
            full=full,
            workers=workers,
            start_method=method,
            seed=seed,
            shm_free_override=shm_free_bytes,
            workdir=Path(tmp),
            on_progress=progress,
            on_update=on_update,
        )
        return run.run()


@dataclass(eq=False)
class CheckRun:
    """One ``check``: the probes in order, each within its share of the budget, then the
    rules over what they recorded."""

    pipeline: Any
    codes: list[str]
    timeout: float
    budget: float
    full: bool
    workers: int
    start_method: str
    seed: int
    shm_free_override: int | None  # stands in for the measured free space of /dev/shm
    workdir: Path
    on_progress: Callable[[str, int | None, int | None], None] | None
    on_update: Callable[[CheckResult], None] | None
    notes: list[str] = field(init=False, default_factory=list)
    probe_status: dict[str, str] = field(init=False, default_factory=dict)
    # probe -> why it could not judge
    not_checked: dict[str, str] = field(init=False, default_factory=dict)
    health_total: int | None = field(init=False, default=None)
    # items per second the probe pool fetched
    health_rate: float | None = field(init=False, default=None)
    health_checked: set[Any] = field(init=False, default_factory=set)
    # A stream's workers compared in a fresh interpreter, where forked ones hang here.
    fresh_sharding: dict[str, Any] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self.deadline = self.started + self.budget
        self.needed = set().union(*(PROBES_FOR[c] for c in self.codes)) if self.codes else set()
        self.length = self.pipeline.length()
        self.batch_size = (
            self.pipeline.batch_size
            if not self.length
            else min(self.pipeline.batch_size, self.length)
        )
        self.result = CheckResult(target=self.pipeline.target)
        self.probes = self.result.probes
        self.worker_method = self.start_method

    # -- helpers -------------------------------------------------------------------------
    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def progress(self, stage: str, done: int | None = None, total: int | None = None) -> None:
        if self.on_progress is not None:
            self.on_progress(stage, done, total)

    def publish(self) -> None:
        self.result.findings = analyse(self.probes, codes=set(self.codes))
        self.result.coverage = self.coverage()
        if self.on_update is not None:
            self.on_update(self.result)

    def startup(self) -> float:
        return STARTUP_S.get(self.worker_method, 30.0)

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> CheckResult:
        from ..runtime.host import host_info

        host = host_info().to_dict()
        self.probes["settings"] = {
            "start_method": self.start_method,
            "pinned_start_method": self.pipeline.baseline.multiprocessing_context,
            "num_workers": self.workers,
            "timeout_s": self.timeout,
            "budget_s": self.budget,
            "full": self.full,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "codes": self.codes,
        }
        self.probes["host"] = {
            k: host.get(k) for k in ("cores", "memory_available_bytes", "shm_free_bytes")
        }
        pickling = None
        try:
            pickling = self._start_pickling()
            self._choose_worker_method(pickling)
            self.publish()
            for probe, wanted, step in (
                ("health", "health" in self.needed, self._run_health),
                ("sharding", "sharding" in self.needed, self._run_sharding),
                ("rng", "rng" in self.needed, self._run_rng),
                ("memory", "memory" in self.needed, self._run_memory),
                ("shm", "shm-too-small" in self.codes, self._measure_shm),
                ("threads", "oversubscription" in self.codes, self._collect_threads),
            ):
                if wanted:
                    self._guarded(probe, step)
                    self.publish()
            if pickling is not None:
                self.progress("loading the pickle in a fresh interpreter")
                self.probes["pickling"] = pickling.finish(
                    time.monotonic() + min(max(self.remaining(), 2.0), 120.0)
                )
                note = self.probes["pickling"].get("note") or ""
                if note.startswith("not checked: "):
                    self.not_checked["pickling (fresh interpreter)"] = note.removeprefix(
                        "not checked: "
                    )
                pickling = None
            self.publish()
        finally:
            if pickling is not None:
                pickling.cancel()
        return self.result

    def _guarded(self, probe: str, step: Callable[[], None]) -> None:
        """Run one probe; if the user's pipeline breaks it in a way no rule covers, say so and go
        on.

        A probe that could not judge (it failed, or its record holds an error its own machinery
        caused: NOTE [probes on real objects] in pickling.py) leaves its codes *not checked*, with
        the reason, and its measurements out of the rules."""
        try:
            step()
        except Exception as exc:
            self.probe_status[probe] = f"failed: {describe_exception(exc)}"
            self.not_checked[probe] = f"the probe failed ({describe_exception(exc, 160)})"
            return
        for text in probe_error_texts(self.probes.get(probe)):
            reason = machinery_error(text)
            if reason is not None:
                self.probes[probe] = {"not_checked": reason, "error_seen": text[:300]}
                self.probe_status[probe] = f"not checked: {reason}"
                self.not_checked[probe] = reason
                return
        status = self.probe_status.get(probe, "")
        if status.startswith("skipped: ") and "not selected" not in status:
            self.not_checked[probe] = status.removeprefix("skipped: ")

    # -- pickling ---------------------------------------------------------------------------------
    def _roots(self) -> dict[str, Any]:
        roots: dict[str, Any] = {"dataset": self.pipeline.dataset}
        if self.pipeline.collate_fn is not None:
            roots["collate_fn"] = self.pipeline.collate_fn
        if self.pipeline.worker_init_fn is not None:
            roots["worker_init_fn"] = self.pipeline.worker_init_fn
        return roots

    def _start_pickling(self) -> Any:
        if "pickling" not in self.needed:
            self.probe_status["pickling"] = "not selected"
            return None
        from .pickling import PicklingProbe

        self.progress("pickling the dataset as spawn would")
        probe = PicklingProbe(self._roots(), self.workdir).start()
        self.probes["pickling"] = {
            "roots": [r.to_dict() for r in probe.results],
            "note": "spawned load pending",
        }
        self.probe_status["pickling"] = "done"
        return probe

    def _choose_worker_method(self, pickling: Any) -> None:
        if self.start_method == "fork":
            return
        if pickling is not None:
            picklable = all(r.ok for r in pickling.results)
        else:
            from .pickler import try_pickle

            picklable = all(try_pickle(obj)[0] is None for obj in self._roots().values())
        if picklable:
            return
        if "fork" in multiprocessing.get_all_start_methods():
            self.worker_method = "fork"
            self.notes.append(
                "worker probes ran under fork: the pipeline cannot be pickled for "
                f"{self.start_method}"
            )
        else:
            self.worker_method = ""
            self.notes.append(
                "worker probes skipped: the pipeline cannot be pickled for "
                f"{self.start_method} and fork is unavailable"
            )

    # -- sample health --------------------------------------------------------------------------
    def _order(self) -> list[int] | None:
        """The pilot (or every index with ``full``); :meth:`_plan` adds the rest once its pace is
        known."""
        if self.pipeline.is_iterable or self.length is None:
            return None
        return (
            list(range(self.length))
            if self.full
            else pilot_order(self.length, PILOT_SIZE, self.seed)
        )

    def _plan(self, checked: set[Any], items_per_s: float, seconds_left: float) -> list[int]:
        self.health_rate = items_per_s
        fits = int(items_per_s * max(0.0, seconds_left) * PLAN_SAFETY)
        order = plan_order(self.length or 0, checked, fits, self.seed)
        self.health_total = len(checked) + len(order)
        return order

    def _run_health(self) -> None:
        if not self.worker_method:
            self.probe_status["health"] = "skipped: no usable start method"
            return
        from .health import HealthSettings, probe_health

        order = self._order()
        self.health_total = (
            len(order) if order is not None else (None if self.full else SAMPLE_SIZE)
        )
        remaining = self.remaining()
        share = max(0.55 * remaining, min(remaining, 2 * self.timeout + self.startup()))
        settings = HealthSettings(
            timeout=self.timeout,
            deadline=time.monotonic() + share,
            workers=self.workers,
            start_method=self.worker_method,
            batch_size=self.batch_size,
            seed=self.seed,
            startup_timeout=self.startup() + self.timeout,
            sample_limit=None if self.full else SAMPLE_SIZE,
        )
        self.progress("fetching samples in worker processes", 0, self.health_total)
        threads = (
            fork_control.threads_here()
        )  # what the workers are forked from (NOTE [fork after use])
        self.probes["health"], self.health_checked = probe_health(
            self.pipeline,
            settings,
            order=order,
            workdir=self.workdir,
            retime=slow_candidates,
            plan=None if self.full else self._plan,
            progress=lambda done: self.progress(
                "fetching samples in worker processes", done, self.health_total
            ),
        )
        self.probe_status["health"] = (
            "done"
            if not self.probes["health"].get("stopped")
            else f"stopped: {self.probes['health']['stopped']}"
        )
        hangs = self.probes["health"].get("hangs") or []
        # The fork after use leaves every worker stuck at its first item: nothing was fetched.
        if hangs and self.worker_method == "fork" and not self.probes["health"].get("fetched"):
            self.probes["health"]["threads_at_fork"] = threads
            control = self._fork_control(hangs[0]["index"])
            self.fresh_sharding = control.pop("sharding", None)
            self.probes["health"]["fork_control"] = control

    def _fork_control(self, index: Any) -> dict[str, Any]:
        """The hung item fetched in a worker forked from a fresh interpreter (NOTE [fork after
        use])."""
        iterable, startup = self.pipeline.is_iterable, index == "<worker start-up>"
        if iterable and not startup and not str(index).endswith("#0"):
            return fork_control.unknown(
                "the item that hung is not the first of its worker's stream"
            )
        if not fork_control.loadable_target(self.pipeline.target):
            return fork_control.unknown(
                "the loader was passed as an object, not a TARGET a fresh interpreter can load"
            )
        if self.remaining() < self.timeout + fork_control.STARTUP_S / 6:
            return fork_control.unknown("the check's time budget ran out before it")
        self.progress("fetching the item that hung in a worker of a fresh interpreter")
        return fork_control.run_control(
            self.pipeline.target,
            None if iterable else (0 if startup else index),
            iterable=iterable,
            timeout=self.timeout,
            batch_size=self.batch_size,
            workdir=self.workdir,
        )

    def _good_indices(self, limit: int | None = None) -> list[int]:
        if self.length is None:
            return []
        bad = bad_indices(self.probes.get("health") or {})
        n = self.length
        if limit is not None and n > limit:
            pool = random.Random(self.seed + 1).sample(range(n), limit)
        else:
            pool = list(range(n))
        return [i for i in pool if i not in bad]

    def _health_blocked(self) -> str | None:
        return health_blocked(self.probes.get("health") or {}, self.pipeline.is_iterable)

    # -- duplicate rng -----------------------------------------------------------------------------
    def _rng_indices(self) -> tuple[list[int], int]:
        health = self.probes.get("health") or {}
        median = (health.get("timing") or {}).get("median_s") or 0.0
        if self.pipeline.is_iterable:
            return list(range(RNG_OTHER_INDICES + 2)), 1
        good = self._good_indices(limit=10_000)
        if not good:
            return [], 0
        spread = [
            good[int(k * (len(good) - 1) / RNG_OTHER_INDICES)] for k in range(RNG_OTHER_INDICES + 1)
        ]
        others = list(dict.fromkeys(spread[1:]))
        # Fewer repeats when samples are slow: 2 epochs × workers each fetch every item.
        allowance = min(0.25 * self.remaining(), 60.0)
        affordable = int(allowance / (2 * median)) if median > 0 else RNG_MAX_REPEATS + len(others)
        repeats = max(2, min(RNG_MAX_REPEATS, affordable - len(others)))
        return [spread[0], *others], repeats

    def _run_rng(self) -> None:
        blocked = self._health_blocked()
        if blocked or not self.worker_method:
            self.probe_status["rng"] = f"skipped: {blocked or 'no usable start method'}"
            return
        if self.remaining() < 1.0:
            self.probe_status["rng"] = "skipped: budget exhausted"
            return
        from .rng import probe_rng

        indices, repeats = self._rng_indices()
        if not indices:
            self.probe_status["rng"] = "skipped: no index could be fetched"
            return
        self.progress("comparing random streams across workers")
        items = repeats + len(indices) - 1
        batch_timeout = max(1.0, min(self.remaining(), self.timeout * items + self.startup()))
        self.probes["rng"] = probe_rng(
            self.pipeline,
            indices=indices,
            repeats=repeats,
            workers=max(2, self.workers),
            start_method=self.worker_method,
            timeout=batch_timeout,
            deadline=time.monotonic()
            + min(self.remaining(), max(0.4 * self.remaining(), batch_timeout)),
            seed=self.seed,
        )
        error = self.probes["rng"].get("error")
        self.probe_status["rng"] = "done" if not error else f"failed: {error}"

    # -- iterable duplicates (NOTE [unsharded streams] in sharding.py) -----------------------------
    def _run_sharding(self) -> None:
        blocked = self._health_blocked() or ("" if self.worker_method else "no usable start method")
        # the sampler splits a map-style dataset: nothing to probe
        if not self.pipeline.is_iterable:
            self.probe_status["sharding"] = "not an IterableDataset"
            return
        if self.fresh_sharding is not None:
            # Compared in a fresh interpreter's workers (NOTE [fork after use]).
            record = self.probes["sharding"] = self.fresh_sharding
            self.probe_status["sharding"] = (
                f"failed: {record['error']}"
                if record.get("error")
                else "done in workers forked from a fresh interpreter (forked from here, they hang)"
            )
            return
        if blocked or self.remaining() < 1.0:
            self.probe_status["sharding"] = f"skipped: {blocked or 'budget exhausted'}"
            return
        from .sharding import duplication_verdict, probe_sharding

        self.progress("comparing the workers' streams")
        share = min(
            self.remaining(), max(0.3 * self.remaining(), self.startup() + 16 * self.timeout)
        )
        record = self.probes["sharding"] = probe_sharding(
            self.pipeline,
            workers=max(2, self.workers),
            start_method=self.worker_method,
            seed=self.seed,
            deadline=time.monotonic() + share,
            timeout=self.timeout,
            startup=self.startup(),
        )
        self.probe_status["sharding"] = (
            f"failed: {record['error']}" if record.get("error") else "done"
        )
        idle = duplication_verdict(record)["idle_workers"]
        if idle and not record.get("error"):
            # Not duplication (no sample came from two workers), but workers that do nothing.
            self.notes.append(
                f"iterable-duplicates: the stream ended with {idle} of its "
                f"{record['workers']} workers idle (they yielded no sample, as a stream with "
                "fewer shards than workers does), so nothing was read twice; the idle workers add "
                "nothing to throughput"
            )

    # -- memory ------------------------------------------------------------------------------------
    def _run_memory(self) -> None:
        blocked = self._health_blocked()
        if blocked or not self.worker_method:
            self.probe_status["memory"] = f"skipped: {blocked or 'no usable start method'}"
            return
        reserve = 1.0
        seconds = (
            (self.remaining() - reserve)
            if self.full
            else min(MEMORY_MAX_SECONDS, self.remaining() - reserve)
        )
        if seconds < 0.5:
            self.probe_status["memory"] = "skipped: budget exhausted"
            return
        from .memory import probe_memory

        n = self.length or 0
        if self.pipeline.is_iterable or not n:
            indices: list[int] = []
            max_samples = MEMORY_ITERABLE_SAMPLES
        else:
            # Passes over the same indices show whether growth stops after the first (NOTE [check
            # coverage]).
            rate = self.health_rate or 0.0
            size = (
                n
                if self.full
                else int(rate * MEMORY_SECONDS / (MEMORY_PASSES + 1))
                if rate
                else MEMORY_UNPACED_POOL
            )
            size = max(MEMORY_MIN_POOL, min(n, MEMORY_MAX_POOL, size))
            indices = memory_pool(
                self.length or 0,
                size,
                self.health_checked,
                bad_indices(self.probes.get("health") or {}),
                self.seed,
            )
            max_samples = MEMORY_PASSES * len(indices)
        if not self.pipeline.is_iterable and not indices:
            self.probe_status["memory"] = "skipped: no index could be fetched"
            return
        self.progress("sampling worker memory while iterating")
        self.probes["memory"] = probe_memory(
            self.pipeline,
            indices=indices,
            workers=self.workers,
            start_method=self.worker_method,
            batch_size=self.batch_size,
            seconds=seconds,
            max_samples=max_samples,
            batch_timeout=max(
                1.0, min(self.remaining(), self.timeout * self.batch_size + self.startup())
            ),
            deadline=self.deadline - reserve,
            seed=self.seed,
            already_checked=self.health_checked,
        )
        error = self.probes["memory"].get("error")
        self.probe_status["memory"] = "done" if not error else f"stopped: {error}"

    # -- shared memory and threads -----------------------------------------------------------------
    def _loader_shape(self) -> tuple[int, int, str]:
        """``(num_workers, prefetch_factor, source)`` the user's loader runs with (or the
        probe's)."""
        baseline = self.pipeline.baseline
        if baseline.num_workers > 0:
            return baseline.num_workers, int(baseline.prefetch_factor or 2), "baseline"
        return self.workers, 2, "check --num-workers"

    def _measure_shm(self) -> None:
        from ..runtime.host import shm_free_bytes

        health = self.probes.get("health") or {}
        batch_bytes = (health.get("collate") or {}).get("max_batch_bytes")
        source = "measured in workers"
        if batch_bytes is None:
            batch_bytes, source = self._batch_bytes_in_process(), "one batch in this process"
        workers, prefetch, config = self._loader_shape()
        measured = self.shm_free_override is None
        self.probes["shm"] = {
            "free_bytes": shm_free_bytes() if measured else self.shm_free_override,
            "measured_free": measured,
            "batch_bytes": batch_bytes,
            "batch_bytes_source": source,
            "num_workers": workers,
            "prefetch_factor": prefetch,
            "config_source": config,
        }
        self.probe_status["shm"] = "done"

    def _batch_bytes_in_process(self) -> int | None:
        from ..pipeline.structure import as_built, fetch_for_collate, nbytes

        dataset = as_built(self.pipeline.dataset)  # what the fetch sets stays off the user's one
        try:
            if self.pipeline.is_iterable or self.length is None:
                items = []
                for item in dataset:
                    items.append(item)
                    if len(items) >= self.batch_size:
                        break
            else:
                good = self._good_indices(limit=10_000)[: self.batch_size]
                if not good:
                    return None
                return nbytes(self.pipeline.collate(fetch_for_collate(dataset, good)))
            return nbytes(self.pipeline.collate(items)) if items else None
        except Exception as exc:
            self.notes.append(
                f"could not build a batch to size shared memory: {describe_exception(exc)}"
            )
            return None

    def _collect_threads(self) -> None:
        from ..runtime.host import usable_cores

        health = self.probes.get("health") or {}
        memory = self.probes.get("memory") or {}
        workers, _, config = self._loader_shape()
        self.probes["threads"] = {
            "report": health.get("threads"),
            "num_workers": workers,
            "config_source": config,
            "cores": usable_cores(),
            "worker_cpu_percent": [s.get("cpu_percent") for s in memory.get("series") or []],
        }
        self.probe_status["threads"] = (
            "done" if health.get("threads") else "no thread report from the workers"
        )

    # -- coverage ----------------------------------------------------------------------------------
    def coverage(self) -> dict[str, Any]:
        health = self.probes.get("health") or {}
        memory = self.probes.get("memory") or {}
        checked = (health.get("fetched") or 0) + (health.get("errors_total") or 0)
        if not self.pipeline.is_iterable:
            checked += (memory.get("fetch_times") or {}).get("new_indices") or 0
        fraction = round(checked / self.length, 4) if self.length and (health or memory) else None
        coverage: dict[str, Any] = {
            "mode": "full" if self.full else "sampled",
            "dataset_length": self.length,
            "indices_requested": health.get("requested"),
            "indices_checked": checked if health or memory else 0,
            "indices_checked_by_memory_probe": (memory.get("fetch_times") or {}).get("new_indices"),
            "fraction_checked": fraction,
            "memory_samples": memory.get("samples"),
            "start_method": self.start_method,
            "worker_start_method": self.worker_method or None,
            "num_workers": self.workers,
            "timeout_s": self.timeout,
            "budget_s": self.budget,
            "elapsed_s": round(time.monotonic() - self.started, 2),
            "seed": self.seed,
            "codes": self.codes,
            "probes": dict(self.probe_status),
            "notes": list(self.notes),
            "not_checked": [
                {
                    "probe": probe,
                    "codes": [c for c in codes_of_probe(probe.split(" ")[0]) if c in self.codes],
                    "reason": reason,
                }
                for probe, reason in self.not_checked.items()
            ],
        }
        if health.get("stopped"):
            coverage["notes"].append(f"sample-health probe stopped early: {health['stopped']}")
        return coverage

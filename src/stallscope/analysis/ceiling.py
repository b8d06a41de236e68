"""This machine's ceiling for the pipeline, how close the pick gets, and the cores a target rate
needs (issue 18, parts 1 and 2). Pure: record in, record keys and sentences out.

NOTE [ceiling]
Two limits bound what any loader configuration can deliver on this machine:

* **cpu**: every sample costs ``cpu_s_per_sample`` CPU seconds whichever process makes it
  (``cpu_cost``, measured single-process by ``throughput/cpu_cost.py``), so the usable cores
  (affinity and cgroup quota, ``runtime/host.py``) make at most ``cores / cpu_s_per_sample``
  samples/s.
* **main-process**: with workers, the main process receives every batch (unpickling, rebuilding
  tensors from shared memory, freeing them); its measured CPU per batch (``main_ms_per_batch``,
  NOTE [receive cost] in ``throughput/measure.py``) allows at most
  ``batch_size / main_s_per_batch``.

The lower of the two is what configurations with workers can reach, and its ``basis`` says which.
A loader without workers receives nothing: one process making every sample itself reaches
``1 / cpu_s_per_sample`` (the probe's one intra-op thread). Where that is higher (samples so cheap
that receiving a batch costs more than making it), the ceiling is that, basis **one-process**: a
0-worker pick faster than the receive limit is no share above 100% of a ceiling it never met
(``invariants.ceiling_bound``; a pick faster than one process at one thread is held to the cores).
``pick_fraction`` is the report's one winner (``sections.best_configuration``) over the ceiling:
near 1, more workers cannot help, only a cheaper pipeline (or more cores) can.

The probe's CPU per sample comes from one short window in one process, early in the run; every
window of the pick measures it again, with the workers. Where the pick outran ``cores ÷`` the
probe's figure and its own windows kept the usable cores busy (``SATURATED`` of them or more), the
probe read more CPU than the pick spent (a first window's warm-up, a busy host's steal): the pick's
rate is then the ceiling, basis **saturated**, at a share of 100%. It is what the ceiling means, all
cores making samples, measured rather than extrapolated. (The demo at ``1faab48``: the probe read
3.37 ms of CPU per sample, the pick's windows 2.9 to 3.3 ms at 2.0 of 2 cores busy, and the
ceiling from the probe put the pick at 112%.)

Cores needed at a target rate: ``target × cpu_s_per_sample ÷ efficiency``. The efficiency is the
pick's CPU efficiency where its CPU was measured (every steady-state window clocks the CPU of the
main process and its workers, ``LoaderCpuClock`` in ``throughput/measure.py``): CPU per sample in
one process over CPU per sample at the pick, so that the cores needed are ``target ×`` the CPU each
sample costs at the pick. CPU time is what the configuration costs whoever else runs on the machine;
a rate ratio is not: measured moments apart on a shared machine, the pick's rate and the
single-process rate each carry whatever load was there then (on a busy 2-core machine, SPEC §3.2's
efficiency of a CPU-bound pick at one worker read 10, the sweep's 0-worker row running torch's
default intra-op threads against everything else). Where no CPU was measured at the pick, SPEC
§3.2's efficiency stands in: the pick's rate over ``min(cores, workers)`` single-process rates at
one intra-op thread (the probe's), else the sweep's. An efficiency above 1 saves waiting, not CPU,
so it counts as 1.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

from ..record.model import BenchResult, trials_of
from ..text import plural
from .invariants import ceiling_bound, checked_ceiling, relabel, samples_per_batch
from .readers import (
    Record,
    batch_size_of,
    config_label,
    number,
    ok_results,
    rate_of,
    recorded_mean,
    result_for_config,
    steady_config,
    workers_of,
)
from .sections import best_configuration

# The pick is "at the ceiling" from this fraction on: more workers cannot help.
AT_CEILING = 0.85
# The pick's own windows kept at least this share of the usable cores busy: its rate is the
# ceiling's measure where it outran the probe's (NOTE [ceiling], basis "saturated").
SATURATED = 0.95


@dataclass
class Pick:
    label: str
    config: dict[str, Any]
    samples_per_s: float
    efficiency: float | None  # as the sweep measured it, when it did
    main_ms_per_batch: float | None
    source: str = "tune"  # tune | bench | profile (the loader the training loop ran)
    cpu_cores: float | None = (
        None  # cores the loader's processes kept busy at the pick, where the sweep sampled them
    )


@dataclass
class CeilingFacts:
    """The record's ``ceiling`` and ``cores_needed`` sections, with the sentences a report
    prints."""

    ceiling: dict[str, Any] | None
    cores_needed: dict[str, Any] | None
    ceiling_sentence: str | None
    cores_sentence: str | None
    free_data_sentence: str | None = None
    # A figure that broke an invariant (NOTE [invariants]): said as a bug, the figure dropped or
    # recomputed.
    problem: Any = None


# -- from the record -----------------------------------------------------------------------------


def pick_of(r: Record) -> Pick | None:
    """The report's one winner, else the loader the training loop ran (``loader_rate``, profile)."""
    best = best_configuration(r)
    if best is not None and best.samples_per_s and best.samples_per_s > 0:
        # persistent_workers changes epoch boundaries only: the sweep's row without it measured the
        # same steady state
        result = (
            best.result
            or result_for_config(r, best.config)
            or next(
                (
                    res
                    for res in ok_results(r)
                    if steady_config(res.config) == steady_config(best.config)
                ),
                BenchResult(),
            )
        )
        return Pick(
            best.label,
            best.config,
            best.samples_per_s,
            result.efficiency,
            result.main_ms_per_batch,
            best.source,
            _busy_cores(result.resources),
        )
    loader = r.get("loader_rate")
    rate = rate_of(loader.get("samples_per_s")) if isinstance(loader, dict) else None
    if isinstance(loader, dict) and rate is not None and rate > 0:
        return Pick(
            config_label(loader.get("config"), loader.get("label")),
            loader.get("config") or {},
            rate,
            None,
            number(loader.get("main_ms_per_batch")),
            "profile",
        )
    return None


def _busy_cores(resources: Any) -> float | None:
    """Cores the main process and the workers kept busy (CPU % of one core, summed, over 100)."""
    if not isinstance(resources, dict) or number(resources.get("main_cpu_percent")) is None:
        return None
    return round(
        (
            float(resources["main_cpu_percent"])
            + (number(resources.get("workers_cpu_percent")) or 0.0)
        )
        / 100.0,
        2,
    )


def _measured(
    r: Record, key: Literal["main_ms_per_batch", "cpu_ms_per_sample"], *, with_workers: bool
) -> list[tuple[dict[str, Any], float]]:
    """(config, figure ``key``) of every measurement: sweep rows, tuner trials, loader_rate."""
    rows: list[tuple[dict[str, Any], Any]] = [
        (res.config, getattr(res, key)) for res in ok_results(r)
    ]
    rows += [(t.config, getattr(t, key)) for t in trials_of(r) if not t.error]
    loader = r.get("loader_rate")
    if isinstance(loader, dict):
        rows.append((loader.get("config") or {}, loader.get(key)))
    out = []
    for config, figure in rows:
        value = number(figure)
        if value is not None and value > 0 and (workers_of(config) > 0 or not with_workers):
            out.append((config, value))
    return out


def receive_ms_per_batch(r: Record, pick: Pick) -> float | None:
    """The main process's CPU ms per batch at the pick: its own measurements (median), else the
    median over configurations with workers at the pick's batch size."""
    costs = _measured(r, "main_ms_per_batch", with_workers=True)
    own = [ms for config, ms in costs if steady_config(config) == steady_config(pick.config)]
    if own:
        return statistics.median(own)
    bs = batch_size_of(pick.config)
    alike = [ms for config, ms in costs if batch_size_of(config) == bs]
    return statistics.median(alike) if alike else None


def loader_cpu_ms_per_sample(r: Record, pick: Pick) -> float | None:
    """CPU ms per sample the whole loader (main process and workers) spent at the pick, median."""
    own = [
        ms
        for config, ms in _measured(r, "cpu_ms_per_sample", with_workers=False)
        if steady_config(config) == steady_config(pick.config)
    ]
    return statistics.median(own) if own else None


def busy_cores(r: Record, pick: Pick, cores: int) -> float | None:
    """Cores the loader's processes kept busy at the pick: its rate × its CPU per sample (both from
    the pick's own windows); else the sweep's CPU sampling of that configuration, which may come
    from another moment (another load) than the pick's rate."""
    at_pick = loader_cpu_ms_per_sample(r, pick)
    busy = pick.samples_per_s * at_pick / 1000.0 if at_pick else pick.cpu_cores
    return None if busy is None else round(min(busy, float(cores)), 2)


def usable_cores_of(r: Record) -> int | None:
    for value in (
        _cost(r).get("usable_cores"),
        (r.get("host") or {}).get("cores"),
        (r.get("scaling") or {}).get("cores"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _cost(r: Record) -> dict[str, Any]:
    cost = r.get("cpu_cost")
    return cost if isinstance(cost, dict) else {}


def ceiling_section(r: Record) -> dict[str, Any] | None:
    """The record's ``ceiling`` key (NOTE [ceiling]); None without a measured CPU cost and a
    pick."""
    cost = _cost(r)
    cpu_s = number(cost.get("cpu_s_per_sample"))
    cores = usable_cores_of(r)
    pick = pick_of(r)
    if not cpu_s or cpu_s <= 0 or cores is None or pick is None:
        return None
    cpu_rate = cores / cpu_s
    # A loader that batches itself: the samples its batches held as measured (NOTE [invariants]).
    batch = (
        batch_size_of(pick.config)
        or samples_per_batch(r, pick.config)
        or number(cost.get("batch_size"))
    )
    main_ms = receive_ms_per_batch(r, pick)
    main_rate = batch / (main_ms / 1000.0) if main_ms and batch else None
    one_process = 1.0 / cpu_s
    rate, basis = ceiling_bound(cpu_rate, main_rate, one_process, pick.samples_per_s)
    busy = busy_cores(r, pick, cores)
    if basis == "cpu" and pick.samples_per_s > rate and (busy or 0.0) >= SATURATED * cores:
        # The pick's own windows kept the cores busy: its rate measures the ceiling, where the
        # probe's single window read more CPU per sample than the pick's (NOTE [ceiling]).
        rate, basis = pick.samples_per_s, "saturated"
    return {
        "samples_per_s": round(rate, 2),
        "basis": basis,
        "pick_fraction": round(pick.samples_per_s / rate, 4),
        "pick_label": pick.label,
        "pick_source": pick.source,
        "pick_samples_per_s": round(pick.samples_per_s, 2),
        "usable_cores": cores,
        "cpu_ms_per_sample": round(cpu_s * 1000.0, 4),
        "cpu_samples_per_s": round(cpu_rate, 2),
        "one_process_samples_per_s": round(one_process, 2),
        "main_ms_per_batch": None if main_ms is None else round(main_ms, 4),
        "batch_size": batch,
        "main_process_samples_per_s": None if main_rate is None else round(main_rate, 2),
        "pick_cpu_cores": busy,
        "others_busy_cores": number(cost.get("others_busy_cores")),
    }


def pick_efficiency(r: Record, pick: Pick, cores: int) -> tuple[float | None, str]:
    """The pick's efficiency and where it comes from (NOTE [ceiling]): CPU per sample in one process
    over CPU per sample at the pick, where the pick's CPU was measured; else SPEC §3.2's rate ratio
    against the probe's single-process time; else the sweep's figure."""
    cost = _cost(r)
    cpu_s, wall = number(cost.get("cpu_s_per_sample")), number(cost.get("wall_s_per_sample"))
    at_pick = loader_cpu_ms_per_sample(r, pick)
    if cpu_s and at_pick:
        return cpu_s * 1000.0 / at_pick, "cpu"
    if wall and wall > 0:
        ideal = min(cores, max(workers_of(pick.config), 1)) / wall
        return pick.samples_per_s / ideal, "rate"
    if pick.efficiency is not None and pick.efficiency > 0:
        return pick.efficiency, "sweep"
    return None, ""


def target_rate_of(r: Record, given: float | None = None) -> tuple[float | None, str | None]:
    """The target rate: ``--target-rate``, else the training step's with free data (profile)."""
    if given is not None and given > 0:
        return float(given), "--target-rate"
    step = number(r.get("free_data_step_s"))
    batch = (
        batch_size_of(r.get("config"))
        or number((r.get("dataset") or {}).get("batch_size"))
        or samples_per_batch(r, r.get("config"))
    )
    if step and step > 0 and batch:
        return batch / step, "train_step with free data"
    return None, None


def cores_needed_section(r: Record, target_rate: float | None = None) -> dict[str, Any] | None:
    """The record's ``cores_needed`` key: cores this pipeline needs at the target rate (NOTE
    [ceiling])."""
    target, source = target_rate_of(r, target_rate)
    cpu_s = number(_cost(r).get("cpu_s_per_sample"))
    cores = usable_cores_of(r)
    pick = pick_of(r)
    if target is None or not cpu_s or cores is None or pick is None:
        return None
    efficiency, of = pick_efficiency(r, pick, cores)
    if efficiency is None:
        return None
    used = min(1.0, efficiency)
    needed = target * cpu_s / used
    return {
        "target_rate": round(target, 2),
        "cores": round(needed, 2),
        "usable_cores": cores,
        "target_source": source,
        "cpu_ms_per_sample": round(cpu_s * 1000.0, 4),
        "efficiency": round(efficiency, 4),
        "efficiency_used": round(used, 4),
        "efficiency_of": pick.label,
        "efficiency_from": of,
        "pick_cpu_ms_per_sample": loader_cpu_ms_per_sample(r, pick),
        "sweep_efficiency": pick.efficiency,
        "others_busy_cores": number(_cost(r).get("others_busy_cores")),
        "short_by": round(max(0.0, needed - cores), 2),
    }


def ceiling_sections(r: Record, target_rate: float | None = None) -> dict[str, Any]:
    """``{"ceiling": ..., "cores_needed": ...}`` for the keys this record supports (for
    record.add)."""
    out: dict[str, Any] = {}
    ceiling = ceiling_section(r)
    if ceiling is not None:
        out["ceiling"] = ceiling
    cores = cores_needed_section(r, target_rate)
    if cores is not None:
        out["cores_needed"] = cores
    return out


# -- in words ------------------------------------------------------------------------------------


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def _ms(ms: float) -> str:
    """Milliseconds with two significant digits at least (0.0026 ms is not 0.00 ms)."""
    return f"{ms:.2f} ms" if ms >= 0.1 else f"{ms:.2g} ms"


def _batch(size: Any) -> str:
    """A batch's samples: a whole number as it is, a mean over batches of several sizes to one
    decimal ("31.7 on average")."""
    size = number(size)
    if not size:
        return "?"
    return f"{size:.0f}" if float(size).is_integer() else f"{size:.1f} on average"


def ceiling_sentence(c: dict[str, Any]) -> str:
    """ "The pick reaches 94% of this machine's ceiling of 800 samples/s (...): more workers cannot
    help; ..."."""
    fraction = c["pick_fraction"]
    main = number(c.get("main_ms_per_batch"))
    if c.get("basis") == "main-process" and main is not None:
        how = (
            f"what the main process can receive: {main:.2f} ms of CPU per batch of "
            f"{_batch(c.get('batch_size'))}"
        )
    elif c.get("basis") == "one-process":
        how = f"one process making every sample itself at {_ms(c['cpu_ms_per_sample'])} of CPU each"
        if main is not None:
            how += (
                f", faster than it can receive them from workers ({main:.2f} ms of CPU per batch "
                f"of {_batch(c.get('batch_size'))})"
            )
    elif c.get("basis") == "saturated":
        how = (
            f"its own windows kept {number(c.get('pick_cpu_cores')) or 0:.2f} of the "
            f"{plural(c.get('usable_cores'), 'usable core')} busy; the CPU probe's "
            f"{_ms(c['cpu_ms_per_sample'])} per sample would allow {_rate(c['cpu_samples_per_s'])}"
        )
    else:
        cores = c.get("usable_cores")
        how = f"{plural(cores, 'usable core')} ÷ {_ms(c['cpu_ms_per_sample'])} of CPU per sample"
    who = "Your loader" if c.get("pick_source") == "profile" else "The pick"
    text = (
        f"{who} ({c.get('pick_label') or 'the best configuration'}, "
        f"{_rate(c['pick_samples_per_s'])} samples/s) reaches {_pct(fraction)} of this "
        f"machine's ceiling of {_rate(c['samples_per_s'])} samples/s ({how})"
    )
    if fraction >= AT_CEILING:
        if c.get("basis") == "one-process":
            return (
                text + ": workers cannot help, receiving a batch costs more than making it; only "
                "less CPU per sample can."
            )
        if c.get("basis") != "main-process":
            return (
                text + ": more workers cannot help; only less CPU per sample (a cheaper decode, "
                "augmentation on the accelerator, caching the deterministic part) or more cores "
                "can."
            )
        return (
            text
            + ": more workers cannot help; larger batches or less to deserialise per sample (uint8 "
            "instead of float) can."
        )
    return text + ": " + _why_below(c)


# Busy cores at the pick from this share of the usable cores count as "the cores were busy".
BUSY_SHARE = 0.8
# Other processes busy on this share of the usable cores: the machine was shared.
OTHERS_SHARE = 0.25


def _why_below(c: dict[str, Any]) -> str:
    """Where the rest of the ceiling went, from what was measured beside the rate."""
    lost = f"{_pct(1 - c['pick_fraction'])} of it"
    cores, busy, others = (
        c.get("usable_cores"),
        number(c.get("pick_cpu_cores")),
        number(c.get("others_busy_cores")),
    )
    if isinstance(cores, int) and others is not None and others >= OTHERS_SHARE * cores:
        return (
            f"other processes kept {others:.2f} of the {cores} usable cores busy while the CPU "
            f"cost was measured: {lost} may be theirs; measure on a quiet machine for the loader's "
            "own share."
        )
    if isinstance(cores, int) and busy is not None and busy >= BUSY_SHARE * cores:
        return (
            f"the loader's processes kept {busy:.2f} of the {cores} usable cores busy, so {lost} "
            "is the CPU the hand-off between processes costs (serialising, the main process "
            "receiving), not waiting."
        )
    if isinstance(cores, int) and busy is not None:
        return (
            f"the loader's processes kept only {busy:.2f} of the {cores} usable cores busy: {lost} "
            "is lost to waits (workers blocked, too few workers or too small a prefetch), not to "
            "the cores."
        )
    return (
        f"{lost} is lost to the loader's own overheads (hand-off between processes, waits), not "
        "to the cores."
    )


def cores_sentence(n: dict[str, Any]) -> str:
    """ "At 5,000 samples/s this pipeline needs 14.1 cores (...): short by 12.1 cores: ..."."""
    pick = n.get("efficiency_of") or "the pick"
    at_pick = number(n.get("pick_cpu_ms_per_sample"))
    if n.get("efficiency_from") == "cpu" and at_pick is not None:
        how = (
            f"{_rate(n['target_rate'])} samples/s × {n['cpu_ms_per_sample']:.2f} ms of CPU per "
            f"sample in one process ÷ {_pct(n['efficiency_used'])} CPU efficiency of {pick}, whose "
            f"processes spend {at_pick:.2f} ms of CPU per sample"
        )
    else:
        how = (
            f"{_rate(n['target_rate'])} samples/s × {n['cpu_ms_per_sample']:.2f} ms of CPU per "
            f"sample ÷ {_pct(n['efficiency_used'])} parallel efficiency of {pick}"
        )
    source = (
        " (the training step's rate with free data)"
        if n.get("target_source") == "train_step with free data"
        else ""
    )
    text = (
        f"At {_rate(n['target_rate'])} samples/s{source} this pipeline needs {n['cores']:,.1f} "
        f"cores ({how})"
    )
    usable = n.get("usable_cores")
    others = number(n.get("others_busy_cores"))
    if isinstance(usable, int) and others is not None and others >= OTHERS_SHARE * usable:
        if n.get("efficiency_from") != "cpu":  # a rate ratio carries the load; CPU time does not
            text += (
                f" (other processes kept {others:.2f} of the {usable} usable cores busy meanwhile: "
                "the efficiency may read low and the cores high; measure on a quiet machine)"
            )
    if isinstance(usable, int) and n["cores"] > usable:
        return text + (
            f"; this machine has {usable} usable: short by {n['short_by']:,.1f} cores: decode on "
            "the accelerator, a cheaper decode, or more CPU per accelerator."
        )
    return (
        text
        + f"; the {usable} usable cores are enough: the loader's settings decide whether it gets "
        "there."
    )


def free_data_sentence(r: Record) -> str | None:
    """The training step with free data (``training/replay.py``) against the step the loop
    measured."""
    step = number(r.get("free_data_step_s"))
    if not step or step <= 0:
        return None
    batches = r.get("free_data_batches")
    text = (
        f"With free data ({batches} cached batches replayed, the loader shut down) train_step "
        f"takes {step * 1000:,.2f} ms per step"
    )
    data_ms, compute_ms = recorded_mean(r, "data_ms"), recorded_mean(r, "compute_ms")
    if data_ms is None or compute_ms is None:
        return text + "."
    loop_ms = data_ms + compute_ms
    return text + (
        f", against {loop_ms:,.2f} ms in the profiled loop: fixing the loader can make the loop at "
        f"most {max(1.0, loop_ms / (step * 1000)):.2f}× faster."
    )


def judged_sections(r: Record) -> dict[str, dict[str, Any]]:
    """``{"ceiling": ..., "cores_needed": ...}`` judged again from the record's measurements with
    today's rules (the keys a command stored are what it judged then), a stored key standing where
    the measurements behind it are not in the record, ``{}`` where neither is."""
    stored = r.get("ceiling")
    ceiling = ceiling_section(r) or (stored if isinstance(stored, dict) else {})
    stored = r.get("cores_needed")
    cores: dict[str, Any] = stored if isinstance(stored, dict) else {}
    given = (
        number(cores.get("target_rate")) if cores.get("target_source") == "--target-rate" else None
    )
    return {"ceiling": ceiling, "cores_needed": cores_needed_section(r, given) or cores}


def ceiling_facts(r: Record) -> CeilingFacts | None:
    """The ``ceiling`` and ``cores_needed`` keys with their sentences (:func:`judged_sections`),
    and the free-data step; None when the record has none of them."""
    judged = judged_sections(r)
    ceiling, cores = judged["ceiling"], judged["cores_needed"]
    ceiling_ok = bool(ceiling) and all(
        number(ceiling.get(k)) is not None
        for k in ("samples_per_s", "pick_fraction", "pick_samples_per_s", "cpu_ms_per_sample")
    )
    cores_ok = bool(cores) and all(
        number(cores.get(k)) is not None
        for k in ("target_rate", "cores", "cpu_ms_per_sample", "efficiency_used", "short_by")
    )
    problem = None
    if ceiling_ok:
        checked, problem = checked_ceiling(r, ceiling)
        ceiling, ceiling_ok = checked or {}, checked is not None
    if ceiling_ok and isinstance(ceiling.get("pick_label"), str):
        ceiling = dict(ceiling, pick_label=relabel(r, ceiling["pick_label"]))
    free = free_data_sentence(r)
    if not ceiling_ok and not cores_ok and free is None and problem is None:
        return None
    return CeilingFacts(
        ceiling=ceiling if ceiling_ok else None,
        cores_needed=cores if cores_ok else None,
        ceiling_sentence=ceiling_sentence(ceiling) if ceiling_ok else None,
        cores_sentence=cores_sentence(cores) if cores_ok else None,
        free_data_sentence=free,
        problem=problem,
    )

"""Training-loop stall analysis: pure functions from measured step times to verdicts and advice.

Nothing here measures or prints. :mod:`stallscope.training.watch` and
:mod:`stallscope.training.runner` record per-step data-wait and compute times and the figures
of the ``profile`` section (SPEC §5, the record schema, stallscope/schema/record-v1.json);
these functions judge them: :func:`judged_profile` adds the verdict, the ranks compared and the
memory drift to a section (from its measurements alone, so ``report`` judges a saved record
again by today's rules), and :func:`profile_recommendations` / :func:`profile_advice` say what
the figures call for.

Definitions (per step, one step = one batch):
- data wait: time the loop spent blocked in ``next()`` on the loader;
- compute: the rest of the step, until the loop asks for the next batch;
- stall fraction = sum(data wait) / sum(data wait + compute), steady state
  (the first batch of every epoch and any warm-up steps are reported apart);
- what-if speed-up = total / compute: how much faster the same steps would
  run if data arrived instantly.

Verdict thresholds (steady-state stall fraction; the numbers and why in
:mod:`stallscope.thresholds`, where the checklist reads them too):
- ``input-bound`` at ``INPUT_BOUND_AT`` or more: the input pipeline is worth fixing;
- ``compute-bound`` below ``COMPUTE_BOUND_BELOW``: a faster loader would gain little;
- ``balanced`` in between: the loader mostly keeps up, with visible waits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..record.model import windows_of
from ..thresholds import COMPUTE_BOUND_BELOW, INPUT_BOUND_AT, STARTUP_SHARE_NOTABLE
from .drift import memory_drift, slowest_rank_per_window

# A prefetch buffer emptier than this on average means the workers cannot keep up: a quarter
# full leaves one batch of slack in a typical 2-worker x prefetch-2 buffer.
BUFFER_STARVED_BELOW = 0.25
# ...and fuller than this means batches wait for the model (spare loader capacity).
BUFFER_FULL_ABOVE = 0.75


def thresholds() -> dict[str, float]:
    return {"input_bound_at": INPUT_BOUND_AT, "compute_bound_below": COMPUTE_BOUND_BELOW}


def verdict_for(stall_fraction: float | None) -> str | None:
    """``input-bound`` / ``balanced`` / ``compute-bound`` (None without measurements)."""
    if stall_fraction is None or math.isnan(stall_fraction):
        return None
    if stall_fraction >= INPUT_BOUND_AT:
        return "input-bound"
    if stall_fraction < COMPUTE_BOUND_BELOW:
        return "compute-bound"
    return "balanced"


def profile_verdict(r: dict[str, Any]) -> str | None:
    """The verdict today's thresholds give the record's stall fraction, so re-rendering an older
    record re-judges it; the stored verdict only where a record has no fraction."""
    fraction = r.get("stall_fraction")
    if isinstance(fraction, (int, float)) and not isinstance(fraction, bool):
        return verdict_for(float(fraction))
    stored = r.get("verdict")
    return stored if isinstance(stored, str) else None


# -- distributed -------------------------------------------------------------------


def rank_report(ranks: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Across ranks: the maximum exposed data wait per step and which rank it is.

    In synchronous data-parallel training every rank waits for the slowest at
    the gradient all-reduce, so one rank's data wait shows up on the others
    as longer compute: the maximum across ranks is what the job loses.
    """
    measured = [r for r in ranks if r.get("data_wait_ms_per_step") is not None]
    if not measured:
        return None
    slowest = max(measured, key=lambda r: r["data_wait_ms_per_step"])
    fastest = min(measured, key=lambda r: r["data_wait_ms_per_step"])
    stalls = [r["stall_fraction"] for r in measured if r.get("stall_fraction") is not None]
    return {
        "world_size": len(ranks),
        "slowest_rank": slowest["rank"],
        "max_data_wait_ms_per_step": slowest["data_wait_ms_per_step"],
        "min_data_wait_ms_per_step": fastest["data_wait_ms_per_step"],
        "max_exposed_data_wait_s": slowest.get("data_wait_s"),
        "max_stall_fraction": max(stalls) if stalls else None,
        # The job as a whole runs at the pace of its most-stalled rank.
        "job_verdict": verdict_for(max(stalls)) if stalls else None,
        "spread_ms_per_step": slowest["data_wait_ms_per_step"] - fastest["data_wait_ms_per_step"],
    }


def judged_profile(profile: Mapping[str, Any]) -> dict[str, Any]:
    """``profile`` (a watch's section, or a saved record's) with what analysis concludes from its
    measurements, by today's rules: ``verdict`` and ``thresholds``; ``distributed`` (the ranks
    compared, and the slowest rank per time window); ``memory_drift`` over the time windows (one
    epoch as the pass, from ``pass_samples``); each rank's ``verdict`` and ``memory_drift``.

    A judgement is replaced only where its measurements are there: a record older than the
    measurements it needs keeps what it says (the verdict of a record without a stall fraction,
    the drift of a rank whose windows carry no memory readings)."""
    out = dict(profile)
    fraction = out.get("stall_fraction")
    if isinstance(fraction, (int, float)) and not isinstance(fraction, bool):
        out["verdict"] = verdict_for(float(fraction))
    elif "stall_fraction" in out:
        out["verdict"] = out.get("verdict") if isinstance(out.get("verdict"), str) else None
    out["thresholds"] = thresholds()
    raw_ranks = out.get("ranks")
    ranks = [_judged_rank(r) for r in raw_ranks if isinstance(r, dict)] if raw_ranks else None
    if "ranks" in out:
        out["ranks"] = ranks
    distributed = rank_report(ranks) if ranks else None
    if distributed is not None and ranks:
        distributed["windows"] = slowest_rank_per_window(ranks)
    out["distributed"] = distributed
    windows = out.get("windows")
    if isinstance(windows, list):
        out["memory_drift"] = memory_drift(windows, pass_samples=_pass_samples(out))
    return out


def _pass_samples(r: Mapping[str, Any]) -> float | None:
    value = r.get("pass_samples")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _judged_rank(rank: dict[str, Any]) -> dict[str, Any]:
    out = dict(rank)
    fraction = out.get("stall_fraction")
    if isinstance(fraction, (int, float)) and not isinstance(fraction, bool):
        out["verdict"] = verdict_for(float(fraction))
    out.setdefault("verdict", None)
    windows = windows_of(out)
    if any(w.main_rss_mb is not None and w.end_step for w in windows):
        drift = memory_drift(windows, pass_samples=_pass_samples(out))
        out["memory_drift"] = None if drift is None else drift["verdict"]
    out.setdefault("memory_drift", None)
    return out


def workers_per_rank(cores: int, local_world_size: int) -> int:
    """Loader workers each local rank can run without oversubscribing the cores they share.

    Each rank gets ``cores // local_world_size`` cores; one of them goes to the
    rank's own main process (the training loop), the rest to its workers, and
    at least one worker so loading still overlaps compute.
    """
    per_rank = max(1, cores // max(1, local_world_size))
    return max(1, per_rank - 1)


# -- advice ------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f}%"


def advise(profile: dict[str, Any], context: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Recommendations from a ``profile`` section, each with what was measured and the expected
    gain.

    ``context`` may carry ``target`` (the TARGET string for a hand-off to
    ``tune``), ``config`` (the LoaderConfig dict used), ``cores`` and
    ``local_world_size``.
    """
    context = context or {}
    rules = (
        _advise_straggler_rank,
        _advise_input_bound,
        _advise_main_process_wait,
        _advise_startup,
        _advise_spare_loader,
        _advise_gpu_idle,
        _advise_workers_per_rank,
    )
    recommendations: list[dict[str, Any]] = []
    for rule in rules:
        rec = rule(profile, context)
        if rec is not None:
            recommendations.append(rec)
    return recommendations


def is_profile(r: dict[str, Any]) -> bool:
    """Whether ``r`` carries a training-loop profile (the steady-state stall figures: only a
    profile records a stall fraction)."""
    return "stall_fraction" in r


def profile_context(r: dict[str, Any]) -> dict[str, Any]:
    """What the advice reads beside the step figures, from the record: the TARGET, the loader
    config, the usable cores and the ranks per host (the host's cores in records without them)."""
    host = r.get("host")
    cores = host.get("cores") if isinstance(host, dict) else None
    config = r.get("config")
    return {
        "target": r.get("target"),
        "config": config if isinstance(config, dict) else {},
        "config_label": r.get("config_label"),
        "cores": r.get("usable_cores") or cores,
        "local_world_size": r.get("local_world_size"),
    }


def profile_recommendations(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The training-loop advice for a record or profile dict (none without a profile), judged from
    its measurements (:func:`judged_profile`)."""
    return advise(judged_profile(r), profile_context(r)) if is_profile(r) else []


def profile_advice(r: dict[str, Any]) -> str | None:
    """The "next knob" sentence for a record or profile dict (None without a profile)."""
    return next_knob(r, profile_recommendations(r)) if is_profile(r) else None


def _measured_line(profile: dict[str, Any]) -> str:
    data = (profile.get("data_ms") or {}).get("mean")
    compute = (profile.get("compute_ms") or {}).get("mean")
    parts = [f"stall fraction {_pct(profile.get('stall_fraction'))}"]
    if data is not None and compute is not None:
        parts.append(f"data wait {data:.2f} ms vs compute {compute:.2f} ms per step")
    occ = profile.get("occupancy")
    if occ:
        parts.append(f"prefetch buffer {occ['mean_ready']:.1f}/{occ['capacity']} ready on average")
    return "; ".join(parts)


def _buffer_fraction(profile: dict[str, Any]) -> float | None:
    occ = profile.get("occupancy")
    return None if not occ else occ.get("mean_fraction")


def _advise_input_bound(profile: dict[str, Any], context: dict[str, Any]) -> dict[str, Any] | None:
    if profile_verdict(profile) != "input-bound":
        return None
    fraction = _buffer_fraction(profile)
    if fraction is not None and fraction >= BUFFER_STARVED_BELOW:
        return None  # batches were ready: the wait is in the main process (next rule)
    config = context.get("config") or {}
    workers = config.get("num_workers")
    target = context.get("target") or "TARGET"
    speedup = profile.get("what_if_speedup")
    gain = f"up to {speedup:.2f}x faster steps if the loader kept up" if speedup else "unknown"
    label = context.get("config_label") or (
        f"num_workers={workers}" if workers is not None else "your loader settings"
    )
    if workers == 0:
        cause = f"with {label} the main process loads every batch itself, between steps"
    elif fraction is not None:
        cause = (
            f"the prefetch buffer is almost always empty: the workers cannot keep up with {label}"
        )
    else:
        cause = f"the loader cannot keep up with {label}"
    detail = (
        f"The training loop waits for data {_pct(profile.get('stall_fraction'))} of the time; "
        f"{cause}. Run `stallscope tune {target}` to find a faster loader config (workers, "
        f"prefetch, batched fetching), or `stallscope stages {target}` to see which stage is slow."
    )
    return {
        "id": "profile-input-bound",
        "title": "The input pipeline limits training: tune the loader",
        "detail": detail,
        "measured": _measured_line(profile),
        "expected_gain": gain,
        "handoff": f"stallscope tune {target}",
    }


def _advise_main_process_wait(
    profile: dict[str, Any], context: dict[str, Any]
) -> dict[str, Any] | None:
    verdict = profile_verdict(profile)
    fraction = _buffer_fraction(profile)
    if fraction is None:
        return None
    # Input-bound with batches waiting, or a visible wait although the buffer is nearly always full.
    if not (
        (verdict == "input-bound" and fraction >= BUFFER_STARVED_BELOW)
        or (verdict == "balanced" and fraction >= BUFFER_FULL_ABOVE)
    ):
        return None
    speedup = profile.get("what_if_speedup")
    return {
        "id": "profile-main-process-wait",
        "title": "Batches are ready but next() is still slow: the cost is in the main process",
        "detail": (
            f"The prefetch buffer was {_pct(fraction)} full on average, yet the loop still waited "
            f"{_pct(profile.get('stall_fraction'))} of each step: the time goes into moving "
            "batches to the main process (unpickling, shared-memory transfer, pin_memory) rather "
            "than producing them. Return fewer, smaller tensors per batch (uint8 instead of "
            "float32, no Python objects), or move the work into the workers."
        ),
        "measured": _measured_line(profile),
        "expected_gain": f"up to {speedup:.2f}x" if speedup else "unknown",
    }


def _advise_startup(profile: dict[str, Any], context: dict[str, Any]) -> dict[str, Any] | None:
    share = profile.get("startup_share_per_epoch")
    per_epoch = share is not None
    if share is None:
        share = profile.get("startup_share")
    first = profile.get("first_batch_s")
    if share is None or first is None or share < STARTUP_SHARE_NOTABLE:
        return None
    where = (
        f"of an epoch of {profile.get('epoch_steps')} steps"
        if per_epoch
        else "of the measured time"
    )
    config = context.get("config") or {}
    fix = (
        "set persistent_workers=True so workers survive between epochs"
        if config.get("num_workers") and not config.get("persistent_workers")
        else "keep worker start-up cheap (persistent_workers=True, a lighter dataset __init__ or "
        "forkserver)"
    )
    return {
        "id": "profile-epoch-startup",
        "title": "The first batch of each epoch costs a visible share of the run",
        "detail": f"Waiting for the first batch took {first:.2f} s ({_pct(share)} {where}); {fix}.",
        "measured": f"first batch {first:.3f} s; {_pct(share)} {where}",
        "expected_gain": f"up to {_pct(share)} of each epoch's time",
    }


def _advise_spare_loader(profile: dict[str, Any], context: dict[str, Any]) -> dict[str, Any] | None:
    if profile_verdict(profile) != "compute-bound":
        return None
    fraction = _buffer_fraction(profile)
    if fraction is None or fraction < BUFFER_FULL_ABOVE:
        return None
    workers = (context.get("config") or {}).get("num_workers")
    return {
        "id": "profile-spare-loader-capacity",
        "title": "The loader has capacity to spare: speed up the model, not the data",
        "detail": (
            f"The prefetch buffer was {_pct(fraction)} full on average and the loop waited for "
            f"data only {_pct(profile.get('stall_fraction'))} of the time. More loader work will "
            "not speed training up; "
            + (
                f"fewer than {workers} workers would likely keep up and free CPU cores. "
                if workers and workers > 1
                else ""
            )
            + "Look at the model step (mixed precision, larger batch, torch.compile)."
        ),
        "measured": _measured_line(profile),
        "expected_gain": "none from the loader; CPU freed for other work",
    }


def _advise_gpu_idle(profile: dict[str, Any], context: dict[str, Any]) -> dict[str, Any] | None:
    util = profile.get("gpu_util")
    if util is None or profile_verdict(profile) != "compute-bound" or util >= 70:
        return None
    return {
        "id": "profile-gpu-underused",
        "title": "Compute-bound, yet the GPU is often idle: the CPU side of the step is slow",
        "detail": (
            f"The loop rarely waits for data, but the GPU was busy only {util:.0f}% of the time: "
            "kernel launches, Python overhead or host-side work inside the step dominate. Try "
            "larger batches, CUDA graphs/torch.compile, or moving host-side preprocessing into "
            "the loader workers."
        ),
        "measured": f"GPU utilisation {util:.0f}%; {_measured_line(profile)}",
        "expected_gain": f"up to {100 / max(util, 1):.1f}x if the GPU were kept busy",
    }


def _advise_straggler_rank(
    profile: dict[str, Any], context: dict[str, Any]
) -> dict[str, Any] | None:
    dist = profile.get("distributed")
    if not dist or dist.get("world_size", 1) < 2:
        return None
    spread = dist.get("spread_ms_per_step") or 0.0
    worst = dist.get("max_data_wait_ms_per_step") or 0.0
    if worst <= 0 or spread < 0.2 * worst:
        return None
    return {
        "id": "profile-straggler-rank",
        "title": (
            f"Rank {dist['slowest_rank']} waits longest for data and holds the other ranks back"
        ),
        "detail": (
            f"Rank {dist['slowest_rank']} waits {worst:.2f} ms per step for data, {spread:.2f} ms "
            "more than the fastest rank; in synchronous data-parallel training every rank waits "
            "for it at the gradient all-reduce. Check that rank's storage/node, its shard of the "
            "data, and its worker count."
        ),
        "measured": (
            f"max data wait {worst:.2f} ms/step on rank {dist['slowest_rank']}; spread "
            f"{spread:.2f} ms/step"
        ),
        "expected_gain": f"up to {spread:.2f} ms per step for every rank",
    }


def _advise_workers_per_rank(
    profile: dict[str, Any], context: dict[str, Any]
) -> dict[str, Any] | None:
    local = context.get("local_world_size") or 1
    cores = context.get("cores")
    workers = (context.get("config") or {}).get("num_workers")
    if local < 2 or not cores or workers is None:
        return None
    suggested = workers_per_rank(cores, local)
    if workers <= suggested:
        return None
    return {
        "id": "profile-workers-per-rank",
        "title": (
            f"{local} local ranks share {cores} cores: use at most {suggested} loader workers per "
            "rank"
        ),
        "detail": (
            f"Each rank runs {workers} loader workers plus its own main process: "
            f"{(workers + 1) * local} busy processes on {cores} usable cores, which slow each "
            f"other down. usable cores // local ranks = {max(1, cores // local)} per rank; "
            f"num_workers={suggested} leaves one core for each rank's training loop."
        ),
        "measured": f"{cores} usable cores, {local} local ranks, num_workers={workers} per rank",
        "expected_gain": (
            "less CPU contention between ranks; confirm with `stallscope profile` under torchrun"
        ),
    }


def next_knob(profile: dict[str, Any], recommendations: Sequence[dict[str, Any]]) -> str:
    """One sentence: the knob to turn next, with the numbers behind it."""
    verdict = profile_verdict(profile)
    if verdict is None:
        return "No complete steps were measured; run more steps."
    data = (profile.get("data_ms") or {}).get("mean") or 0.0
    compute = (profile.get("compute_ms") or {}).get("mean") or 0.0
    head = (
        f"{verdict}: {_pct(profile.get('stall_fraction'))} of each step waits for data "
        f"({data:.2f} ms data wait vs {compute:.2f} ms compute)"
    )
    if recommendations:
        first = recommendations[0]
        return f"{head}. Next: {first['title']}" + (
            f" — run `{first['handoff']}`." if first.get("handoff") else "."
        )
    if verdict == "compute-bound":
        return f"{head}. The loader keeps up; speed up the model step instead."
    return (
        f"{head}. The loader mostly keeps up; tuning it would gain at most "
        f"{profile.get('what_if_speedup') or 1:.2f}x."
    )

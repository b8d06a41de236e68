"""Console summary of a ``profile`` section (``stallscope profile``, ``ss.watch`` and the
integrations).

Reads only the record dict. :func:`summary_lines` gives plain text (for
:func:`stall_summary` (``ss.stall_summary(w)``), the callbacks' ``summary()``
and logs); :func:`render_profile` prints the same facts with rich formatting.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from ..analysis.training import judged_profile, profile_advice, profile_verdict, thresholds
from .console_advice import render_recommendations
from .console_table import titled_table
from .document_windows import long_run_lines

_VERDICT_STYLE = {
    "input-bound": "bold red",
    "balanced": "bold yellow",
    "compute-bound": "bold green",
}


def _ms(dist: dict[str, Any] | None, key: str = "mean") -> str:
    return "–" if not dist or dist.get(key) is None else f"{dist[key]:.2f} ms"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def headline(profile: dict[str, Any]) -> str:
    verdict = profile_verdict(profile) or "no complete steps"
    speedup = profile.get("what_if_speedup")
    what_if = f"; if data were free: {speedup:.2f}x faster" if speedup else ""
    return (
        f"{verdict}: stall fraction {_pct(profile.get('stall_fraction'))} "
        f"over {profile.get('steps', 0)} steady steps{what_if}"
    )


def summary_lines(profile: dict[str, Any]) -> list[str]:
    """The profile as plain text lines."""
    name = profile.get("name") or "train"
    lines = [f"stallscope {name}: {headline(profile)}"]
    data, compute, step = profile.get("data_ms"), profile.get("compute_ms"), profile.get("step_ms")
    lines.append(
        f"  per step: data wait {_ms(data)} (p95 {_ms(data, 'p95')}), compute {_ms(compute)} "
        f"(p95 {_ms(compute, 'p95')}), step {_ms(step)}"
        + (f", {profile['steps_per_s']:.1f} steps/s" if profile.get("steps_per_s") else "")
    )
    limits = thresholds()
    lines.append(
        f"  steps: {profile.get('total_steps', 0)} total, {profile.get('warmup_steps', 0)} "
        f"warm-up, {profile.get('epochs', 0)} epoch(s); thresholds: input-bound >= "
        f"{limits['input_bound_at'] * 100:.0f}%, compute-bound < "
        f"{limits['compute_bound_below'] * 100:.0f}%"
    )
    first = profile.get("first_batch_s")
    if first is not None:
        per_epoch = profile.get("startup_share_per_epoch")
        share = (
            f"{_pct(per_epoch)} of an epoch of {profile.get('epoch_steps')} steps"
            if per_epoch is not None
            else f"{_pct(profile.get('startup_share'))} of measured time"
        )
        lines.append(f"  first batch of epoch: {first:.3f} s (kept out of steady state; {share})")
    timing = profile.get("timing") or {}
    if timing.get("note"):
        lines.append(f"  timing: {timing['method']}: {timing['note']}")
    if occ := profile.get("occupancy"):
        lines.append(
            f"  prefetch buffer: {occ['mean_ready']:.1f}/{occ['capacity']} batches ready on "
            f"average (empty {_pct(occ['empty_fraction'])}, full {_pct(occ['full_fraction'])} of "
            f"{occ['samples']} samples)"
        )
    else:
        lines.append("  prefetch buffer: not available (num_workers=0 or not a torch DataLoader)")
    gpu = profile.get("gpu") or {}
    if profile.get("gpu_util") is not None:
        lines.append(
            f"  GPU {gpu.get('name') or ''}: {profile['gpu_util']:.0f}% utilisation, "
            f"peak memory {gpu.get('memory_used_mb_max') or 0:.0f} MB"
        )
    elif gpu.get("reason"):
        lines.append(f"  GPU: not sampled ({gpu['reason']})")
    if res := profile.get("resources"):
        cpu = (
            f"main {res['main_cpu_percent']:.0f}%, workers {res['workers_cpu_percent']:.0f}% "
            f"({res['n_workers']} workers)"
        )
        lines.append(
            f"  CPU: {cpu}; RSS main {res['main_rss_mb']:.0f} MB, workers "
            f"{res['workers_rss_mb']:.0f} MB"
        )
    if sync := profile.get("sync"):
        lines.append(
            f"  sync ({sync['mode']}): {sync['calls']} calls, {sync.get('mean_ms') or 0:.3f} ms "
            f"mean, {_pct(sync.get('share_of_wall'))} of wall time (counted as compute)"
        )
    dist = profile.get("distributed")
    if dist:
        lines.append(
            f"  job ({dist['world_size']} ranks, figures above are rank "
            f"{profile.get('rank', 0)}'s): {dist.get('job_verdict') or 'n/a'} at the most-stalled "
            f"rank's {_pct(dist.get('max_stall_fraction'))}; slowest rank {dist['slowest_rank']} "
            f"waits {dist['max_data_wait_ms_per_step']:.2f} ms/step for data (fastest "
            f"{dist['min_data_wait_ms_per_step']:.2f} ms/step)"
        )
        for r in profile.get("ranks") or []:
            lines.append(
                f"    rank {r['rank']} ({r.get('host', '')}): stall "
                f"{_pct(r.get('stall_fraction'))}, data {r.get('data_wait_ms_per_step') or 0:.2f} "
                f"ms/step, compute {r.get('compute_ms_per_step') or 0:.2f} ms/step"
            )
    lines.extend(long_run_lines(profile))
    advice = profile_advice(profile)
    if advice:
        lines.append(f"  advice: {advice}")
    return lines


def stall_summary(source: Any) -> str:
    """Plain-text summary of a profile dict, or of anything with ``to_dict()`` (a watch, a
    callback), judged by today's rules (``analysis.training.judged_profile``)."""
    profile = judged_profile(source if isinstance(source, dict) else source.to_dict())
    return "\n".join(summary_lines(profile))


def render_profile(data: dict[str, Any], console: Console) -> None:
    """Rich console summary of a record carrying the profile keys."""
    verdict = profile_verdict(data)
    style = _VERDICT_STYLE.get(verdict or "", "bold")
    console.print(f"[{style}]{escape(headline(data))}[/]")
    table = titled_table(
        "Per step (steady state)", ["", "mean", "p50", "p95", "max", "total s"], "lrrrrr"
    )
    for label, key in (("data wait", "data_ms"), ("compute", "compute_ms"), ("step", "step_ms")):
        dist = data.get(key) or {}
        table.add_row(
            label,
            _ms(dist),
            _ms(dist, "p50"),
            _ms(dist, "p95"),
            _ms(dist, "max"),
            "–" if dist.get("total_s") is None else f"{dist['total_s']:.3f}",
        )
    console.print(table)
    for line in summary_lines(data)[2:]:
        if line.lstrip().startswith("advice:"):
            continue
        console.print(line, highlight=False, markup=False)
    render_recommendations(data, console, bullet="→")
    advice = profile_advice(data)
    if advice:
        console.print(f"[bold]Advice:[/] {escape(advice)}", highlight=False)

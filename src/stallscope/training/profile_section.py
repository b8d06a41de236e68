"""The ``profile`` section of a watch (``Watch.to_dict()``, the record schema): measurements only.

Everything here runs when the figures are asked for, never in the training
loop: the steady-state figures from the per-step data wait and compute
(:mod:`.summary`), what the background sampling saw (occupancy, GPU, CPU and
memory), what synchronising cost, the ranks (:mod:`.gather`), each epoch's
start-up against a whole epoch, the time windows
(:mod:`.windows`), and what the advice needs to know besides the steps (usable
cores, ranks per host, the loader config). What they mean (the verdict, the ranks compared, the
memory drift) and the advice are analysis (:func:`stallscope.analysis.training.judged_profile`,
:func:`~stallscope.analysis.training.profile_recommendations`), from this section or a saved
record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import windows as time_windows
from .gather import distributed_section
from .sampling import Samples
from .summary import (
    epoch_startup,
    gpu_summary,
    loader_context,
    merge_resources,
    occupancy_summary,
    summarize_steps,
    sync_summary,
)


def profile_section(
    *,
    name: str,
    data_s: Sequence[float],
    compute_s: Sequence[float],
    epoch_starts: Sequence[int],
    warmup: int,
    timing: dict[str, Any],
    samples: Samples,
    gpu: Any,
    sync_mode: str | None,
    sync_s: Sequence[float],
    ranks: list[dict[str, Any]] | None,
    loader: Any,
    windows: list[dict[str, Any]],
    window_s: float,
    batch_size: int | None,
    timeline: bool = True,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``profile`` section from what a watch recorded (see the module docstring).

    ``data_s``/``compute_s``: per step (compute for the closed steps);
    ``windows``: the run's time windows with their resource figures;
    ``context``: what the caller knows beyond the loader (target, config,
    epoch length), over what :func:`~.summary.loader_context` reads.
    """
    profile = summarize_steps(
        data_s=list(data_s),
        compute_s=list(compute_s),
        epoch_starts=list(epoch_starts),
        warmup=warmup,
        with_timeline=timeline,
    )
    profile["name"] = name
    profile["timing"] = dict(timing)
    profile["occupancy"] = occupancy_summary(
        list(samples.occupancy_ready), samples.occupancy_capacity
    )
    util = list(samples.gpu_util)
    profile["gpu_util"] = round(sum(util) / len(util), 2) if util else None
    profile["gpu"] = gpu_summary(gpu, util, samples.gpu_memory_max, samples.gpu_memory_total)
    profile["resources"] = merge_resources(samples.resources)
    profile["sync"] = sync_summary(sync_mode, list(sync_s), profile)
    profile.update(distributed_section(ranks))
    ctx = loader_context(loader)
    ctx.update(context or {})
    epoch_steps = ctx.get("epoch_steps")
    profile.update(epoch_startup(profile, epoch_steps))
    profile.update(time_windows.long_run_section(windows, window_s, epoch_steps, batch_size))
    # Facts the advice reads (analysis.training.profile_context); the TARGET is the record's.
    profile["usable_cores"] = ctx.get("cores")
    profile["local_world_size"] = ctx.get("local_world_size")
    for key in ("config", "config_label"):
        if ctx.get(key) is not None:
            profile[key] = ctx[key]
    return profile

"""``stallscope profile TARGET``: data stalls inside the target's real training step (SPEC §3.5).

Works when launched by ``torchrun``: every rank measures its own shard, the
summaries are gathered (gloo on CPU, nccl on CUDA), and rank 0 prints and
writes the report.
"""

from __future__ import annotations

import argparse
import contextlib

from ..errors import PipelineError, UsageError
from ..training import DEFAULT_STEPS, MIN_WARMUP
from ..training.windows import DEFAULT_WINDOW_S
from . import _common as common

DESCRIPTION = (
    "Run the target's train_step on a real DataLoader and measure how much of each step waits"
    " for data. The target returns a dict with 'dataset', 'model' and 'train_step'"
    " (train_step(model, batch) or train_step(batch)). Works under torchrun."
)


def build_parser() -> common.ArgumentParser:
    parser = common.command_parser("stallscope profile", DESCRIPTION)
    parser.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help=f"measured steps (default {DEFAULT_STEPS})"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="steps run first and kept out of the figures (default: num_workers × prefetch_factor "
        f"+ num_workers, at least {MIN_WARMUP})",
    )
    parser.add_argument(
        "--num-workers", type=int, default=None, help="override the target's num_workers"
    )
    parser.add_argument(
        "--device",
        default=None,
        metavar="cpu|cuda",
        help="where the model runs (default: cuda when available, else cpu)",
    )
    parser.add_argument(
        "--sync",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="synchronise the device at every step boundary for honest timing"
        " (default: on for CUDA)",
    )
    common.add_batch_timeout_argument(parser)
    parser.add_argument(
        "--window",
        type=float,
        default=DEFAULT_WINDOW_S,
        metavar="SECONDS",
        dest="window_s",
        help="length of the time windows for stall and memory over time, and the memory drift "
        f"(default {DEFAULT_WINDOW_S:g})",
    )
    parser.add_argument(
        "--windows-jsonl",
        default=None,
        metavar="PATH",
        help="append each closed time window to this JSON-lines file as the run goes",
    )
    common.add_target_rate_argument(parser)
    return parser


def _run(ctx: common.CommandContext) -> int:
    from ..analysis.training import judged_profile
    from ..pipeline.preflight import preflight
    from ..runtime.distributed import init_from_env, rank_info, shutdown
    from ..training.runner import (
        default_warmup,
        resolve_device,
        resolve_profile_sync,
        run_profile,
    )

    args = ctx.args
    if not args.window_s > 0:
        raise UsageError(f"--window must be a positive number of seconds, not {args.window_s:g}.")
    target_rate = common.positive_target_rate(args)
    if args.num_workers is not None and args.num_workers < 0:
        raise UsageError(f"--num-workers must be at least 0, not {args.num_workers}.")
    device = resolve_device(args.device)
    started_group = init_from_env(device)
    try:
        info = rank_info()
        quiet = ctx.quiet or not info.is_main
        pipeline = common.run_target_loader(args)
        common.refuse_on_kind(pipeline, "profile")
        record = ctx.new_record("profile", pipeline.target, pipeline)
        preflight(pipeline)
        config = pipeline.baseline
        if args.num_workers is not None:
            config = config.replace(num_workers=args.num_workers)
        with common.progress_bar(
            ctx.console, disable=quiet, counter="{task.completed}/{task.total} steps"
        ) as progress:
            warmup = default_warmup(config) if args.warmup is None else args.warmup
            task = progress.add_task(
                f"profiling train_step ({config.label()}, {device})", total=warmup + args.steps
            )
            profile = run_profile(
                pipeline,
                steps=args.steps,
                warmup=warmup,
                config=config,
                device=device,
                sync=resolve_profile_sync(args.sync, device),
                timeout=args.timeout,
                on_step=lambda done, total: progress.update(task, completed=done),
                watch_options={"window_s": args.window_s, "windows_jsonl": args.windows_jsonl},
            )
        record.add(**judged_profile(profile))
        if info.world_size == 1:
            # The loader on its own (no training step) and the CPU per sample: the ceiling, and the
            # cores needed at the step's rate with free data (or --target-rate).
            from ..throughput.cpu_cost import measure_loader_rate

            status = ctx.console.status("measuring the loader alone and its CPU cost per sample")
            with contextlib.nullcontext() if quiet else status:
                try:
                    record.add(
                        loader_rate=measure_loader_rate(pipeline, config, timeout=args.timeout)
                    )
                except PipelineError:
                    # The loop ran this loader; a failure on its own leaves the report without
                    # a ceiling.
                    pass
                common.add_ceiling(record, pipeline, target_rate)
        if not info.is_main:
            ctx.record = None  # rank 0 writes the report for the whole job
            return 0
        common.print_summary(ctx, record)
        if not ctx.quiet and device == "cpu" and args.sync:
            ctx.console.print(
                "note: --sync has no effect on CPU (there is no asynchronous device work)."
            )
        return 0
    finally:
        shutdown(started_group)


def main(argv: list[str] | None = None) -> int:
    return common.execute(build_parser(), argv, _run)

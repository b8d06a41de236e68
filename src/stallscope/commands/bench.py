"""``stallscope bench TARGET``: throughput over a grid of loader settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import _common as common

if TYPE_CHECKING:
    from ..throughput.measure import Measurement

# The options bench() takes as they are parsed.
PASSED_ON = (
    "batch_sizes prefetch_factors persistent_workers pin_memory in_order worker_threads repeats"
    " min_window_s timeout"
)


def build_parser() -> common.ArgumentParser:
    parser = common.command_parser(
        "stallscope bench", "Measure DataLoader throughput over a grid of settings."
    )
    parser.add_argument(
        "--num-workers",
        type=common.int_list,
        default=None,
        metavar="N,N,...",
        help="worker counts (default: 0,1,2,cores,2×cores,4×cores with usable cores, none above "
        "the batches in one epoch)",
    )
    parser.add_argument(
        "--prefetch-factor",
        dest="prefetch_factors",
        type=common.int_list,
        default=None,
        metavar="N,...",
    )
    parser.add_argument(
        "--batch-sizes",
        "--batch-size-grid",
        dest="batch_sizes",
        type=common.int_list,
        default=None,
        metavar="N,...",
        help="batch sizes to sweep (SPEC §3.3); --batch-size sets a single one",
    )
    parser.add_argument(
        "--persistent-workers", type=common.bool_list, default=None, metavar="true,false"
    )
    parser.add_argument(
        "--pin-memory", type=common.bool_list, default=None, metavar="true,false", help="CUDA only"
    )
    parser.add_argument("--in-order", type=common.bool_list, default=None, metavar="true,false")
    parser.add_argument(
        "--worker-threads",
        type=common.int_list,
        default=None,
        metavar="K,...",
        help="threads fetching each batch's items inside every worker (0 = off; "
        "for latency-bound sources; the dataset must be thread-safe)",
    )
    common.add_start_method_argument(parser, "multiprocessing context for workers")
    parser.add_argument(
        "--repeats", type=int, default=3, help="repeats per config, interleaved (default 3)"
    )
    parser.add_argument(
        "--window",
        dest="min_window_s",
        type=float,
        default=1.0,
        metavar="WINDOW",
        help="seconds of steady state per repeat (default 1)",
    )
    common.add_batch_timeout_argument(parser)
    parser.add_argument(
        "--plot", type=Path, default=None, metavar="PATH", help="PNG: throughput vs num_workers"
    )
    common.add_target_rate_argument(parser)
    return parser


def _run(ctx: common.CommandContext) -> int:
    from ..runtime.host import usable_cores
    from ..throughput.sweep import bench, default_worker_counts

    args = ctx.args
    if args.repeats < 1:
        common.fail("--repeats must be at least 1.")
    if args.worker_threads and min(args.worker_threads) < 0:
        common.fail("--worker-threads must be 0 (off) or more threads.")
    if args.num_workers and min(args.num_workers) < 0:
        common.fail("--num-workers takes worker counts of 0 or more.")
    target_rate = common.positive_target_rate(args)
    pipeline = common.run_target_loader(args)
    record = ctx.new_record("bench", pipeline.target, pipeline)
    workers = args.num_workers or default_worker_counts(
        usable_cores(), epoch_batches=pipeline.batches_per_epoch()
    )
    n_configs = len(workers) * len(args.prefetch_factors or [0]) * len(args.batch_sizes or [0])
    n_configs *= (
        len(args.persistent_workers or [0])
        * len(args.pin_memory or [0])
        * len(args.in_order or [0])
    )
    n_configs *= len(args.worker_threads or [0])
    with common.progress_bar(
        ctx.console, disable=ctx.quiet, counter="{task.completed}/{task.total} runs"
    ) as progress:
        task = progress.add_task("benchmarking", total=n_configs * args.repeats)

        def on_result(index: int, repeat: int, m: Measurement) -> None:
            progress.update(
                task, advance=1, description=f"{m.config.label()}: {m.samples_per_s:,.0f}/s"
            )

        with common.keeping_partial(lambda partial: record.add(**partial.to_dict())):
            result = bench(
                pipeline,
                num_workers=workers,
                multiprocessing_context=args.start_method,
                on_result=on_result,
                **common.same_named(args, PASSED_ON),
            )
    record.add(**result.to_dict())
    common.add_verified_advice(record, pipeline)
    common.add_ceiling(record, pipeline, target_rate)
    common.print_summary(ctx, record)
    if args.plot is not None:
        from ..render.plots import write_plot

        written = write_plot("scaling", record.to_dict(), args.plot)
        if written and not ctx.quiet:
            ctx.console.print(f"wrote {written}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.execute(build_parser(), argv, _run)

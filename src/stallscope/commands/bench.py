"""``stallscope bench TARGET``: throughput over a grid of loader settings."""

from __future__ import annotations

from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..runtime.host import usable_cores
from ..throughput.sweep import bench, default_worker_counts
from ._common import (
    ArgumentParser,
    CommandContext,
    add_output_arguments,
    add_target_arguments,
    bool_list,
    execute,
    fail,
    int_list,
    run_target_loader,
)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="stallscope bench", description="Measure DataLoader throughput over a grid of settings.")
    add_target_arguments(parser)
    parser.add_argument("--num-workers", type=int_list, default=None, metavar="N,N,...",
                        help="worker counts (default: 0,1,2,cores,2×cores,4×cores with usable cores)")
    parser.add_argument("--prefetch-factor", type=int_list, default=None, metavar="N,...")
    parser.add_argument("--batch-sizes", "--batch-size-grid", dest="batch_sizes", type=int_list, default=None,
                        metavar="N,...", help="batch sizes to sweep (SPEC §3.3); --batch-size sets a single one")
    parser.add_argument("--persistent-workers", type=bool_list, default=None, metavar="true,false")
    parser.add_argument("--pin-memory", type=bool_list, default=None, metavar="true,false", help="CUDA only")
    parser.add_argument("--in-order", type=bool_list, default=None, metavar="true,false")
    parser.add_argument("--start-method", choices=["fork", "spawn", "forkserver"], default=None,
                        help="multiprocessing context for workers")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per config, interleaved (default 3)")
    parser.add_argument("--window", type=float, default=1.0, help="seconds of steady state per repeat (default 1)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for any one batch")
    parser.add_argument("--plot", type=Path, default=None, metavar="PATH", help="PNG: throughput vs num_workers")
    add_output_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    return execute(build_parser(), argv, _run)


def _run(ctx: CommandContext) -> int:
    args = ctx.args
    if args.repeats < 1:
        fail("--repeats must be at least 1.")
    pipeline = run_target_loader(args)
    record = ctx.new_record("bench", pipeline.target, pipeline)
    workers = args.num_workers or default_worker_counts(usable_cores())
    n_configs = len(workers) * len(args.prefetch_factor or [0]) * len(args.batch_sizes or [0])
    n_configs *= len(args.persistent_workers or [0]) * len(args.pin_memory or [0]) * len(args.in_order or [0])
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} runs"),
        TimeElapsedColumn(),
        console=ctx.console,
        transient=True,
        disable=ctx.quiet,
    ) as progress:
        task = progress.add_task("benchmarking", total=n_configs * args.repeats)

        def on_result(index: int, repeat: int, m) -> None:
            progress.update(task, advance=1, description=f"{m.config.label()}: {m.samples_per_s:,.0f}/s")

        try:
            result = bench(
                pipeline,
                num_workers=workers,
                batch_sizes=args.batch_sizes,
                prefetch_factors=args.prefetch_factor,
                persistent_workers=args.persistent_workers,
                pin_memory=args.pin_memory,
                in_order=args.in_order,
                multiprocessing_context=args.start_method,
                repeats=args.repeats,
                min_window_s=args.window,
                timeout=args.timeout,
                on_result=on_result,
            )
        except KeyboardInterrupt as interrupt:
            partial = getattr(interrupt, "partial", None)
            if partial is not None:
                record.add(**partial.to_dict())
            raise
    record.add(**result.to_dict())
    if not ctx.quiet:
        from ..render.console_bench import render_bench

        render_bench(record.to_dict(), ctx.console)
    if args.plot is not None:
        from ..render.plots import plot_scaling

        written = plot_scaling(record.to_dict(), args.plot)
        if written and not ctx.quiet:
            ctx.console.print(f"wrote {written}")
    return 0

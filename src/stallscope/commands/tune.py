"""``stallscope tune TARGET``: the fastest loader config within a time budget."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import UsageError
from ._common import (
    ArgumentParser,
    CommandContext,
    add_output_arguments,
    add_target_arguments,
    execute,
    run_target_loader,
)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="stallscope tune",
        description="Find the fastest DataLoader config within a time budget (a guided search, not a grid).",
    )
    add_target_arguments(parser)
    parser.add_argument("--budget", type=float, default=60.0, metavar="SECONDS",
                        help="wall-clock budget for tuning, profile included (default 60)")
    parser.add_argument("--tune-batch-size", action="store_true",
                        help="also try other batch sizes (changes training dynamics: off by default)")
    parser.add_argument("--max-workers", type=int, default=None, metavar="N",
                        help="largest num_workers to try (default max(64, 8×cores), at most one per batch of an epoch)")
    parser.add_argument("--memory-budget", type=float, default=None, metavar="MB",
                        help="memory for workers + in-flight batches (default half the available RAM)")
    parser.add_argument("--repeats", type=int, default=None, metavar="N",
                        help="interleaved rounds for the finalists (default: adaptive, until the pick is clear)")
    parser.add_argument("--emit", choices=["yaml", "python", "diff"], default=None,
                        help="print the pick on stdout: your loader call with the tuned settings (python), only the "
                             "keyword arguments to change (diff), or LoaderConfig YAML for ss.make_loader (yaml)")
    parser.add_argument("--start-methods", action="store_true",
                        help="also time worker start-up under forkserver (a one-time cost with persistent workers; "
                             "its workers import the pipeline afresh, which can take seconds)")
    parser.add_argument("--seed", type=int, default=0, help="seed for samplers and the bootstrap")
    add_output_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    return execute(build_parser(), argv, _run)


def _run(ctx: CommandContext) -> int:
    from ..tuning.emit import render_diff, render_python, render_yaml, snippet_for_record
    from ..tuning.tuner import tune

    args = ctx.args
    if args.budget <= 0:
        raise UsageError(f"--budget must be positive, not {args.budget:g}.")
    pipeline = run_target_loader(args)
    record = ctx.new_record("tune", pipeline.target, pipeline)
    # With --emit, stdout carries only the emitted config (pipe-able); the summary goes to stderr.
    console = Console(stderr=True, highlight=False) if args.emit else ctx.console
    started = time.perf_counter()
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} s budget"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=ctx.quiet,
    ) as progress:
        task = progress.add_task("profiling", total=args.budget)

        measured: list[dict] = []

        def on_trial(trial) -> None:
            # Kept in the record as we go: Ctrl-C still leaves the trials in the partial report.
            measured.append(trial.to_dict())
            record.add(trials=measured, tuning_seconds=round(time.perf_counter() - started, 3))
            rate = "failed" if trial.error else f"{trial.samples_per_s:,.0f}/s"
            progress.update(
                task,
                completed=min(args.budget, time.perf_counter() - started),
                description=f"{trial.phase}: {trial.config.label()} {rate}",
            )

        result = tune(
            pipeline,
            budget_s=args.budget,
            tune_batch_size=args.tune_batch_size,
            max_workers=args.max_workers,
            memory_budget_mb=args.memory_budget,
            repeats=args.repeats,
            seed=args.seed,
            on_trial=on_trial,
            compare_start_methods=args.start_methods,
        )
    record.add(**result.to_dict())
    if not ctx.quiet:
        from ..render.console_tune import render_tune, render_what_to_set

        render_tune(record.to_dict(), console)
        render_what_to_set(record.to_dict(), console, recommendations=False)
    if args.emit:
        comment = (
            f"stallscope tune {pipeline.target}: {result.samples_per_s:,.1f} samples/s"
            + (f", {result.speedup:.2f}x the baseline" if result.speedup else "")
            + f", confidence {result.confidence:.0%}"
        )
        snippet = snippet_for_record(record.to_dict())
        assert snippet is not None  # the record has a pick
        if args.emit == "yaml":
            text = render_yaml(snippet, result.config, comment=comment)
        elif args.emit == "diff":
            text = render_diff(snippet, comment=comment)
        else:
            text = render_python(snippet, comment=comment)
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0

"""``stallscope tune TARGET``: the fastest loader config within a time budget."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ..config import LoaderConfig
from ..errors import UsageError
from . import _common as common

if TYPE_CHECKING:
    from ..tuning.trial import Trial


# The options tune() takes as they are parsed.
PASSED_ON = "tune_batch_size max_workers memory_budget_mb repeats seed compare_start_methods"


def build_parser() -> common.ArgumentParser:
    parser = common.command_parser(
        "stallscope tune",
        "Find the fastest DataLoader config within a time budget (a guided search, not a grid).",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wall-clock budget for tuning, profile included (default 60)",
    )
    parser.add_argument(
        "--tune-batch-size",
        action="store_true",
        help="also try other batch sizes (changes training dynamics: off by default)",
    )
    parser.add_argument(
        "--max-workers",
        type=int,
        default=None,
        metavar="N",
        help="largest num_workers to try (default max(64, 8×cores), at most one per batch"
        " of an epoch)",
    )
    parser.add_argument(
        "--memory-budget",
        dest="memory_budget_mb",
        type=float,
        default=None,
        metavar="MB",
        help="memory for workers + in-flight batches (default half the available RAM)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        metavar="N",
        help="interleaved rounds for the finalists (default: adaptive, until the pick is clear)",
    )
    parser.add_argument(
        "--emit",
        choices=["yaml", "python", "diff"],
        default=None,
        help="print the pick on stdout: your loader call with the tuned settings (python),"
        " only the keyword arguments to change (diff), or LoaderConfig YAML for"
        " ss.make_loader (yaml)",
    )
    parser.add_argument(
        "--start-methods",
        dest="compare_start_methods",
        action="store_true",
        help="also time worker start-up under forkserver (a one-time cost with persistent workers; "
        "its workers import the pipeline afresh, which can take seconds)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for samplers and the bootstrap")
    common.add_target_rate_argument(parser)
    return parser


def _run(ctx: common.CommandContext) -> int:
    from ..tuning.tuner import tune

    args = ctx.args
    if args.budget <= 0:
        raise UsageError(f"--budget must be positive, not {args.budget:g}.")
    target_rate = common.positive_target_rate(args)
    # With --emit, stdout carries only the emitted config: what the user's code prints as it
    # loads goes to stderr (the calls after it are held: NOTE [held output]).
    with contextlib.redirect_stdout(sys.stderr) if args.emit else contextlib.nullcontext():
        pipeline = common.run_target_loader(args)
    record = ctx.new_record("tune", pipeline.target, pipeline)
    # The CPU cost per sample (the ceiling's) is measured inside the budget, before the search.
    budget = args.budget - min(common.measure_cpu_cost(record, pipeline), 0.5 * args.budget)
    # With --emit, stdout carries only the emitted config (pipe-able); the summary goes to stderr.
    console = Console(stderr=True, highlight=False) if args.emit else ctx.console
    started = time.perf_counter()
    with common.progress_bar(
        console, disable=ctx.quiet, counter="{task.completed:.0f}/{task.total:.0f} s budget"
    ) as progress:
        task = progress.add_task("profiling", total=args.budget)

        def on_plan(plan: dict[str, Any]) -> None:
            # Said up front: on a slow pipeline the budget may fit only a few measurements.
            record.add(
                search={"plan": plan}
            )  # a Ctrl-C report keeps it; the full search section replaces it
            if not ctx.quiet:
                progress.console.print(
                    "P" + plan["summary"][1:] + ".", style="dim", highlight=False
                )

        measured: list[dict[str, Any]] = []

        def on_trial(trial: Trial) -> None:
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
            budget_s=budget,
            on_trial=on_trial,
            on_plan=on_plan,
            **common.same_named(args, PASSED_ON),
        )
    record.add(**result.to_dict())
    common.add_verified_advice(record, pipeline)
    common.add_ceiling(record, pipeline, target_rate)
    common.print_summary(ctx, record, console)
    if args.emit:
        text = emitted_text(pipeline.target, record.to_dict(), args.emit)
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.execute(build_parser(), argv, _run)


def emitted_text(target: str, data: dict[str, Any], emit: str) -> str:
    """What ``--emit python|diff|yaml`` writes for a record: the config it names, as the code that
    ran (NOTE [verified snippets]), or the change in words where none ran."""
    from ..analysis.tune_rules import advice_in_words
    from ..render.loader_code import render_diff, render_python, render_yaml, to_yaml
    from ..render.loader_snippet import snippet_for_record

    emitted, comment = emitted_config(target, data)
    advice = data.get("loader_code") or {}
    # The form that ran: the knobs set on the object the user's factory returns where their
    # constructor call could not be replayed, else the call.
    form = "attributes" if advice.get("form") == "attributes" else "call"
    snippet = snippet_for_record(data, emitted.to_dict(), form=form)
    if emit == "yaml":
        return (
            render_yaml(snippet, emitted, comment=comment)
            if snippet
            else to_yaml(emitted, comment=comment)
        )
    if not advice.get("verified") or snippet is None:
        # No code that was not run; the change in words instead.
        return "".join(
            f"# {line}\n" for line in (comment + "\n" + advice_in_words(advice)).splitlines()
        )
    if emit == "diff":
        return render_diff(snippet, comment=comment)
    return render_python(snippet, comment=comment)


def emitted_config(target: str, section: dict[str, Any]) -> tuple[LoaderConfig, str]:
    """The config --emit prints and its comment: the user's own when the best is within noise of
    it."""
    from ..analysis import recommendations
    from ..analysis.tune_rules import (
        epoch_rule,
        gain_floor,
        how_sure,
        keep_yours_sentence,
        keeps_yours,
    )

    best, baseline = section["best"], section["baseline"]
    lines = [f"stallscope tune {target}"]
    rule = epoch_rule(section)  # the rate per epoch decided (NOTE [per-epoch rate])
    if keeps_yours(section):  # the rule doctor's verdict reads too (NOTE [one verdict])
        config = LoaderConfig.from_dict(baseline["config"])
        lines.append(
            f"Keep yours: {keep_yours_sentence(best, baseline, gain_floor(section), rule)}."
        )
        if rule is not None:
            lines.append(rule.sentence[0].upper() + rule.sentence[1:] + ".")
        for rec in recommendations(section):
            if rec.id == "persistent-workers":
                x = rec.values
                lines.append(
                    f"Optional: persistent_workers=True (gap at an epoch boundary "
                    f"({x['label']}): {x['gap_without_s']:.2f} s without, {x['gap_with_s']:.2f} s "
                    f"with persistent workers; {x['saved_s']:.2f} s saved per epoch after the "
                    "first)."
                )
        return config, "\n".join(lines)
    config = LoaderConfig.from_dict(best["config"])
    speedup = best.get("speedup")
    if rule is not None:
        speedup = rule.speedup
        lines.append(
            f"{rule.pick_samples_per_s or 0.0:,.1f} samples/s per epoch, start-ups included"
            + (f", {speedup:.2f}x the baseline" if speedup else "")
            + f" ({best['samples_per_s']:,.1f} samples/s in steady state); {how_sure(best)}"
        )
        lines.append(rule.sentence[0].upper() + rule.sentence[1:] + ".")
        return config, "\n".join(lines)
    lines.append(
        f"{best['samples_per_s']:,.1f} samples/s"
        + (f", {speedup:.2f}x the baseline" if speedup else "")
        + f"; {how_sure(best)}"
    )
    return config, "\n".join(lines)

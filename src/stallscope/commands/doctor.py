"""``stallscope doctor [TARGET]``: check + sweep + stages + tune (+ profile) in one report.

With no TARGET it runs on the built-in demo pipeline (``stallscope.demo``).
Everything lands in one folder: report.json, report.md (+ plots), report.html.
Exit codes: 0; 1 when the checks found an ``error``; 2 when the target cannot be loaded or a
step could not measure it (the folder still holds what the other steps measured).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from ..checks.findings import DEFAULT_TIMEOUT_S
from ..config import LoaderConfig
from ..errors import NotMeasured, PipelineError, UsageError
from ..record import RunRecord
from . import _common as common

if TYPE_CHECKING:
    from ..target import Pipeline

DEMO_TARGET = "stallscope.demo:pipeline"
STEPS = ("check", "bench", "stages", "tune", "changes", "profile")
CHECK_BUDGET_S = 40.0


# doctor prints its report to the console; the files are extra copies.
OUTPUTS = common.Outputs(
    help={
        "json": "also write the record here",
        "md": "also write Markdown here",
        "html": "also write HTML here",
    }
)


def build_parser() -> common.ArgumentParser:
    parser = common.command_parser(
        "stallscope doctor",
        "Check, benchmark, break down and tune a pipeline; one report with what to set and why.",
        target="optional",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("stallscope-report"),
        metavar="DIR",
        help="folder for report.json, report.md, report.html and plots"
        " (default ./stallscope-report)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=45.0,
        metavar="SECONDS",
        help="time budget of the tuner (default 45)",
    )
    parser.add_argument(
        "--changes-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="time budget of the code-change step: changes applied in the probes and raced"
        " against the config the verdict picks (default 30)",
    )
    parser.add_argument(
        "--check-budget",
        type=float,
        default=CHECK_BUDGET_S,
        metavar="SECONDS",
        help="time budget of the check step: the probes share it, each stopping at its share"
        f" (default {CHECK_BUDGET_S:g})",
    )
    parser.add_argument(
        "--no-changes",
        action="store_true",
        help="skip the code-change step (same as --skip changes)",
    )
    parser.add_argument(
        "--skip", default="", metavar="STEP,...", help=f"steps to skip: {', '.join(STEPS)}"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"per-sample timeout of the checks (default {DEFAULT_TIMEOUT_S:g} s)",
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="repeats per config in the sweep (default 2)"
    )
    parser.add_argument(
        "--num-workers",
        type=common.int_list,
        default=None,
        metavar="N,N,...",
        help="worker counts the sweep measures (default: 0,1,2,cores,2×cores,4×cores with usable"
        " cores, none above the batches in one epoch, as bench)",
    )
    common.add_target_rate_argument(parser)
    return parser


def _run(ctx: common.CommandContext) -> int:
    from ..pipeline.preflight import preflight
    from ..target import load_target

    args = ctx.args
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(STEPS)
    if unknown:
        raise UsageError(
            f"--skip takes {', '.join(STEPS)}; {', '.join(sorted(unknown))} is not a step."
        )
    if args.no_changes:
        skip.add("changes")
    if args.changes_budget is not None and args.changes_budget <= 0:
        raise UsageError(f"--changes-budget must be positive, not {args.changes_budget:g}.")
    if args.check_budget <= 0:
        raise UsageError(f"--check-budget must be positive, not {args.check_budget:g}.")
    if args.num_workers and min(args.num_workers) < 0:
        raise UsageError("--num-workers takes worker counts of 0 or more.")
    target_rate = common.positive_target_rate(args)
    out: Path = args.out
    # The report folder is written by execute() through these paths, on Ctrl-C too; where --json,
    # --md and --html all name other paths, it is not made.
    defaulted = [name for name in ("json", "md", "html") if getattr(args, name) is None]
    args.json = args.json or out / "report.json"
    args.md = args.md or out / "report.md"
    args.html = args.html or out / "report.html"
    if defaulted:
        out.mkdir(parents=True, exist_ok=True)

    target = args.target
    if target is None:
        target = DEMO_TARGET
        _build_demo(ctx)
    pipeline = load_target(target, batch_size=args.batch_size, collate=args.collate)
    pre = preflight(pipeline)
    record = ctx.new_record("doctor", pipeline.target, pipeline)
    from ..throughput.sweep import dataset_facts

    record.add(dataset=dataset_facts(pipeline, pre))
    if pipeline.train_step is None:
        skip.add("profile")
    # What this loader kind cannot do is said once, not reported as a finding (NOTE [loader kinds]).
    not_run = common.kind_limits(pipeline, [s for s in STEPS if s not in skip])
    skip.update(item["step"] for item in not_run)
    if not_run:
        record.add(not_run=not_run)

    failures: list[dict[str, str]] = []
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]{task.fields[step]:<7}[/]"),
        BarColumn(bar_width=30),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
    )
    with common.progress_bar(ctx.console, disable=ctx.quiet, columns=columns) as progress:
        for step in STEPS:
            if step in skip:
                continue
            task = progress.add_task("starting", total=1.0, step=step)

            def report(text: str, fraction: float | None = None, *, _task: TaskID = task) -> None:
                if fraction is None:
                    progress.update(_task, description=text)
                else:
                    progress.update(_task, description=text, completed=fraction)

            started = time.perf_counter()
            try:
                # A step may hand over what it measured before Ctrl-C (the sweep does).
                with common.keeping_partial(lambda partial: record.add(**partial.to_dict())):
                    sections = RUNNERS[step](pipeline, args, report, record)
            except NotMeasured as exc:
                # stallscope's own stand-in did not hold (NOTE [verified stand-ins]): said, not
                # a failure of the user's pipeline.
                not_run.append({"step": step, "why": str(exc)})
                record.add(not_run=not_run)
                progress.update(task, completed=1.0, description=f"not measured: {exc}")
                continue
            except PipelineError as exc:
                # One failing step (a pipeline that breaks only under spawn, say) must not
                # lose what the other steps measured: note it and go on.
                failures.append({"step": step, "message": str(exc)})
                progress.update(task, completed=1.0, description=f"[red]failed[/]: {exc}")
                continue
            record.add(**sections)
            progress.update(
                task, completed=1.0, description=f"done in {time.perf_counter() - started:.0f} s"
            )
            if step == "check" and (why := forked_workers_hang(sections)):
                not_run.append({"step": "configs with worker processes", "why": why})
                record.add(not_run=not_run)
    if failures:
        record.add(step_failures=failures)
    common.add_verified_advice(record, pipeline)
    if not skip >= {"bench", "tune"}:
        common.add_ceiling(record, pipeline, target_rate)
    common.print_summary(ctx, record)
    if failures:
        # A step that could not measure the pipeline is exit 2, as the step's own command would
        # give (README "Exit codes"); the report still holds what the other steps measured.
        _print_failure(failures)
        return 2
    data = record.to_dict()
    has_errors = any(f.get("severity") == "error" for f in data.get("findings", []))
    return 1 if has_errors else 0


def _print_failure(failures: list[dict[str, str]]) -> None:
    """One sentence on stderr naming the first step that failed and why (the others by name)."""
    from rich.console import Console
    from rich.markup import escape

    first = failures[0]
    others = [f["step"] for f in failures[1:]]
    also = f" ({', '.join(others)} failed too)" if others else ""
    message = first["message"].rstrip(".")
    Console(stderr=True, highlight=False).print(
        f"[bold red]error:[/] {escape(first['step'])} could not measure the pipeline"
        f"{escape(also)}: {escape(message)}.",
        markup=True,
        highlight=False,
    )


def _build_demo(ctx: common.CommandContext) -> None:
    from ..demo.cache import build_demo_dataset

    if not ctx.quiet:
        with ctx.console.status("preparing the demo dataset (built once, then cached)"):
            build = build_demo_dataset()
    else:
        build = build_demo_dataset()
    if not ctx.quiet and getattr(build, "built", False):
        ctx.console.print(f"built the demo dataset in {build.seconds:.1f} s at {build.path}")


# -- steps: each returns record sections ------------------------------------------------

Report = Callable[..., None]


def _step_check(pipeline: Pipeline, args: Any, report: Report, record: RunRecord) -> dict[str, Any]:
    from ..checks.runner import check

    def progress(text: str, done: int | None = None, total: int | None = None) -> None:
        report(text, done / total if done is not None and total else None)

    result = check(pipeline, timeout=args.timeout, budget=args.check_budget, progress=progress)
    return result.to_dict()


def forked_workers_hang(check: dict[str, Any]) -> str | None:
    """Why no config with workers can be measured here, where the check found that workers
    forked from this process hang once it has run the pipeline (NOTE [fork after use] in
    checks/fork_control.py); None where it did not. The sweep, the tuner and the stage
    breakdown then measure in this process only: every worker trial would wait out its
    timeout."""
    for finding in check.get("findings") or []:
        if finding.get("code") == "hang" and (
            (finding.get("evidence") or {}).get("cause") == "fork-after-use"
        ):
            return (
                "workers forked from this process hang once it has run the pipeline (the hang "
                "finding); measure them from a script that starts its workers before any "
                "in-process use, or with --start-method forkserver where the dataset pickles"
            )
    return None


def _step_bench(pipeline: Pipeline, args: Any, report: Report, record: RunRecord) -> dict[str, Any]:
    from ..throughput.sweep import bench, default_worker_counts

    workers = args.num_workers or default_worker_counts(epoch_batches=pipeline.batches_per_epoch())
    if forked_workers_hang(record.sections):
        workers = [0]
    total = len(workers) * args.repeats
    done = [0]

    def on_result(index: int, repeat: int, m: Any) -> None:
        done[0] += 1
        report(f"{m.config.label()}: {m.samples_per_s:,.0f} samples/s", done[0] / total)

    result = bench(pipeline, num_workers=workers, repeats=args.repeats, on_result=on_result)
    return result.to_dict()


def _step_stages(
    pipeline: Pipeline, args: Any, report: Report, record: RunRecord
) -> dict[str, Any]:
    from ..breakdown.probe import stages

    def progress(text: str, fraction: float | None = None) -> None:
        report(text, fraction)

    workers = 0 if forked_workers_hang(record.sections) else None
    return stages(pipeline, num_workers=workers, progress=progress).to_dict()


def sweep_best(record: RunRecord) -> LoaderConfig | None:
    """The config the sweep measured fastest, if the sweep ran: per epoch where its epochs
    restart and their start-up decides, else in steady state (``analysis.sweep_epochs``), the
    same config the verdict names "the fastest in the sweep". It races the tuner's finalists; it
    is not, by itself, what to use."""
    from ..analysis.sweep_epochs import best_result

    best = best_result(record.to_dict())
    return None if best is None else LoaderConfig.from_dict(best.config)


def _step_tune(pipeline: Pipeline, args: Any, report: Report, record: RunRecord) -> dict[str, Any]:
    from ..tuning.tuner import tune

    # One winner per report: the sweep's best races the tuner's finalists head to head.
    best = sweep_best(record)
    seeds = [(best, "sweep-best")] if best is not None else []

    started = time.perf_counter()

    def on_trial(trial: Any) -> None:
        label = (
            getattr(trial, "label", None)
            or getattr(getattr(trial, "config", None), "label", lambda: "")()
        )
        rate = getattr(trial, "samples_per_s", None)
        text = f"{label}: {rate:,.0f} samples/s" if rate else str(label)
        report(text, min(1.0, (time.perf_counter() - started) / args.budget))

    no_workers = forked_workers_hang(record.sections) is not None
    return tune(
        pipeline,
        budget_s=args.budget,
        on_trial=on_trial,
        seeds=seeds,
        max_workers=0 if no_workers else None,
    ).to_dict()


def _step_changes(
    pipeline: Pipeline, args: Any, report: Report, record: RunRecord
) -> dict[str, Any]:
    from ..analysis.run_verdict import decide
    from ..changes import DEFAULT_BUDGET_S, code_changes

    # Changes race the run's one verdict (NOTE [one verdict]): the config the report tells the user
    # to set (the user's own where keeping it is the verdict), never a config the race set aside.
    chosen = decide(record.to_dict()).config
    pick = LoaderConfig.from_dict(chosen) if chosen else sweep_best(record)
    budget = args.changes_budget or DEFAULT_BUDGET_S
    result = code_changes(pipeline, pick, budget_s=budget, progress=report)
    return result.to_dict()


def _step_profile(
    pipeline: Pipeline, args: Any, report: Report, record: RunRecord
) -> dict[str, Any]:
    from ..analysis.training import judged_profile
    from ..training.runner import run_profile

    def on_step(done: int, total: int) -> None:
        report(f"step {done}/{total}", done / total if total else None)

    return judged_profile(run_profile(pipeline, on_step=on_step))


RUNNERS: dict[str, Callable[[Pipeline, Any, Report, RunRecord], dict[str, Any]]] = {
    "check": _step_check,
    "bench": _step_bench,
    "stages": _step_stages,
    "tune": _step_tune,
    "changes": _step_changes,
    "profile": _step_profile,
}


def main(argv: list[str] | None = None) -> int:
    return common.execute(build_parser(), argv, _run, outputs=OUTPUTS)

"""``stallscope check TARGET``: worker-safety, memory and sample-health checks (SPEC §4).

Exit code 1 when an error-severity finding exists, 0 otherwise, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import multiprocessing
from typing import TYPE_CHECKING

from ..checks.findings import CODES, DEFAULT_BUDGET_S, DEFAULT_TIMEOUT_S
from ..errors import UsageError
from . import _common as common

if TYPE_CHECKING:
    from ..checks.result import CheckResult

# The options check() takes as they are parsed.
PASSED_ON = "timeout full num_workers start_method only skip seed"


def _codes(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in values if v not in CODES]
    if unknown or not values:
        raise argparse.ArgumentTypeError(
            f"unknown code {unknown[0] if unknown else text!r}; choose from {', '.join(CODES)}"
        )
    return values


def build_parser() -> common.ArgumentParser:
    parser = common.command_parser(
        "stallscope check",
        "Worker-safety, memory and sample-health checks with stable finding codes: "
        + ", ".join(CODES)
        + ".",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="longest one sample may take before it counts as a hang"
        f" (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"total time for all probes (default {DEFAULT_BUDGET_S:g}; none with --full)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="fetch every index (default: a sample, with the coverage stated)",
    )
    parser.add_argument(
        "--num-workers",
        type=int,
        default=None,
        metavar="N",
        help="workers for the probes (default min(2, cores))",
    )
    common.add_start_method_argument(
        parser,
        "multiprocessing start method for the probes (default: the loader's, else the platform's)",
    )
    parser.add_argument(
        "--only", type=_codes, default=None, metavar="CODE,...", help="run only these checks"
    )
    parser.add_argument(
        "--skip", type=_codes, default=None, metavar="CODE,...", help="skip these checks"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed for the sampled indices (default 0)"
    )
    parser.add_argument(
        "--shm-free",
        type=float,
        default=None,
        metavar="MB",
        help="judge shared memory against this many free MB instead of this machine's /dev/shm "
        "(e.g. 64, Docker's default)",
    )
    return parser


def _run(ctx: common.CommandContext) -> int:
    from ..checks.runner import check

    # forkserver workers fork from a server process; with torch preloaded there, each
    # worker starts in milliseconds instead of importing torch again (this process is
    # ours, so no user preload list is overridden).
    multiprocessing.set_forkserver_preload(["torch"])
    args = ctx.args
    if args.shm_free is not None and args.shm_free < 0:
        raise UsageError(f"--shm-free must be a number of megabytes >= 0, not {args.shm_free:g}.")
    pipeline = common.run_target_loader(args)
    common.refuse_on_kind(pipeline, "check")
    record = ctx.new_record("check", pipeline.target, pipeline)
    budget = args.budget if args.budget is not None else (None if args.full else DEFAULT_BUDGET_S)

    def on_update(result: CheckResult) -> None:
        # The record is complete after every probe, so Ctrl-C still leaves a useful report.
        record.add(**result.to_dict())

    with common.progress_bar(ctx.console, disable=ctx.quiet) as progress:
        task = progress.add_task("checking", total=None)

        def on_progress(stage: str, done: int | None, total: int | None) -> None:
            progress.update(task, description=stage, completed=done or 0, total=total)

        result = check(
            pipeline,
            budget=budget,
            shm_free_bytes=None if args.shm_free is None else int(args.shm_free * 1024 * 1024),
            progress=on_progress,
            on_update=on_update,
            **common.same_named(args, PASSED_ON),
        )
    record.add(**result.to_dict())
    common.print_summary(ctx, record)
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    return common.execute(build_parser(), argv, _run)

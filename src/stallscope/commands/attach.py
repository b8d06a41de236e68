"""``stallscope attach PID``: sample a running training process from outside, no code change.

py-spy samples the process and its descendants (NOTE [attach sampling] in ``attach/probe.py``);
``analysis/attach.py`` counts the training thread's data wait, folds the workers' samples into
stage rows and finds stuck threads; the record keeps the samples, so ``report`` recounts them.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from ..errors import UsageError
from . import _common as common


def _add_positive(
    parser: argparse.ArgumentParser,
    flag: str,
    kind: type,
    default: float,
    *,
    metavar: str,
    help: str,
) -> None:
    """``flag``: a positive number of type ``kind``; its help ends with its default."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    parser.add_argument(
        flag, type=parse, default=default, metavar=metavar, help=f"{help} (default {default:g})"
    )


def build_parser() -> common.ArgumentParser:
    from ..analysis.attach import HANG_AFTER_S

    parser = common.command_parser(
        "stallscope attach",
        "Sample a running training process from outside, without pausing it or changing its "
        "code (py-spy): how much of the training thread's time is data wait, where the "
        "DataLoader workers spend theirs (the stage table), stuck threads, uneven workers, and "
        "under torchrun every rank.",
        target=None,
    )
    parser.add_argument("pid", type=int, metavar="PID", help="the training process (or torchrun)")
    _add_positive(parser, "--duration", float, 30.0, metavar="S", help="seconds to sample")
    _add_positive(parser, "--rate", int, 100, metavar="HZ", help="samples per second per thread")
    _add_positive(
        parser,
        "--hang-after",
        float,
        HANG_AFTER_S,
        metavar="S",
        help="a thread in one stack this long is reported stuck",
    )
    parser.add_argument(
        "--tree",
        action="store_true",
        help="PID launches the ranks (torchrun and the like are recognised without it): sample "
        "every child Python process as a rank and name the slowest",
    )
    parser.add_argument(
        "--data-frames",
        default="",
        metavar="NAME,...",
        help="functions (as py-spy names them, e.g. MyLoader.__iter__) that also count as data "
        "wait on the training thread: a generator or a loader stallscope does not know",
    )
    return parser


def _run(ctx: common.CommandContext) -> int:
    from ..analysis.attach import attach_facts, attach_stage_rows, attach_summary
    from ..attach.probe import attach

    args = ctx.args
    record = ctx.new_record("attach", f"pid {args.pid}")
    captured: dict[str, Any] = {}

    def sample() -> None:
        try:
            captured["capture"] = attach(
                args.pid, duration_s=args.duration, rate_hz=args.rate, whole_tree=args.tree
            )
        except BaseException as exc:  # handed to the main thread below
            captured["error"] = exc

    worker = threading.Thread(target=sample, name="stallscope-attach", daemon=True)
    with common.progress_bar(
        ctx.console, disable=ctx.quiet, counter=None, description=f"sampling process {args.pid}"
    ) as bar:
        task = bar.add_task(f"sampling process {args.pid}", total=args.duration)
        started = time.monotonic()
        worker.start()
        while worker.is_alive():
            worker.join(timeout=0.2)
            bar.update(task, completed=min(args.duration, time.monotonic() - started))
    if "error" in captured:
        raise captured["error"]
    capture = captured["capture"].to_dict()
    capture["hang_after_s"] = args.hang_after
    capture["data_frames"] = [n.strip() for n in args.data_frames.split(",") if n.strip()]
    record.add(attach_capture=capture)
    facts = attach_facts(record.to_dict())
    assert facts is not None
    if not facts.loader_seen and facts.worker_of is not None:
        raise UsageError(
            f"process {args.pid} is a DataLoader worker, not the training process; attach to "
            f"its parent, PID {facts.worker_of}."
        )
    if not facts.loader_seen:
        record.sections.pop("attach_capture")
        doing = ", ".join(f"{f.name} ({f.share * 100:.0f}%)" for f in facts.doing) or "nothing"
        raise UsageError(
            f"no data loader in sight in process {args.pid}: no DataLoader worker and no sample "
            f"inside a loader's __next__; its main thread spent its time in {doing}."
        )
    record.add(attach=attach_summary(facts), stages=attach_stage_rows(facts))
    common.print_summary(ctx, record)
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.execute(build_parser(), argv, _run, runs_loaders=False)

"""``stallscope stages TARGET``: per-stage cost breakdown and augmentation overhead (SPEC §3.4)."""

from __future__ import annotations

import argparse
from typing import Any

from . import _common as common


def _name_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated transform names")
    return names


# The options stages() takes as they are parsed.
PASSED_ON = (
    "samples max_seconds start_method device augmentations baseline_transforms differential"
    " drop_cache timeout callees"
)


def build_parser() -> common.ArgumentParser:
    parser = common.command_parser(
        "stallscope stages",
        "Time per sample in each stage of the pipeline (read, decode, each transform, collate,"
        " worker→main transfer, pin and host→device with CUDA), measured inside DataLoader"
        " workers; augmentation overhead; __getitem__ hot spots.",
    )
    parser.add_argument(
        "--num-workers",
        type=int,
        default=None,
        metavar="N",
        help="workers to measure in (default: half the usable cores, at least 1)",
    )
    parser.add_argument(
        "--samples", type=int, default=256, metavar="N", help="samples to measure (default 256)"
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=15.0,
        metavar="S",
        help="stop the worker run after this long (default 15)",
    )
    common.add_start_method_argument(parser, "worker start method (default: the platform's)")
    parser.add_argument(
        "--device",
        default="auto",
        help="where to time pin and host→device copies: auto (CUDA if present), cpu, cuda[:N]",
    )
    parser.add_argument(
        "--augmentations",
        type=_name_list,
        default=None,
        metavar="NAME,...",
        help="transforms to count as augmentation (default: detect random ones)",
    )
    parser.add_argument(
        "--baseline-transforms",
        type=_name_list,
        default=None,
        metavar="NAME,...",
        help="transforms the no-augmentation baseline keeps; all others count as augmentation",
    )
    parser.add_argument(
        "--no-differential",
        dest="differential",
        action="store_false",
        help="skip the in-process run with vs without the augmentations",
    )
    parser.add_argument(
        "--hotspots",
        type=int,
        default=10,
        metavar="N",
        help="how many __getitem__ hot spots to list (0: skip cProfile)",
    )
    parser.add_argument(
        "--drop-cache",
        action="store_true",
        help="allow dropping the dataset's files from the page cache to split storage fetch"
        " from CPU work",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="longest wait for one batch from a worker",
    )
    parser.add_argument(
        "--no-callees",
        dest="callees",
        action="store_false",
        help="keep 'other (__getitem__)' whole instead of breaking out the calls it makes"
        " (5%% or more)",
    )
    return parser


def _run(ctx: common.CommandContext) -> int:
    from ..breakdown.probe import stages
    from ..breakdown.workers import default_stage_workers

    args = ctx.args
    record = ctx.new_record("stages", args.target)
    pipeline = common.run_target_loader(args)
    common.refuse_on_kind(pipeline, "stages")
    workers = default_stage_workers() if args.num_workers is None else args.num_workers
    with _progress(ctx) as progress:
        result = stages(
            pipeline,
            num_workers=workers,
            hotspots=max(0, args.hotspots),
            progress=progress,
            **common.same_named(args, PASSED_ON),
        )
    record.add(**result.to_dict())
    common.print_summary(ctx, record)
    return 0


class _progress:
    """A rich progress bar per phase of the measurement (nothing when --quiet)."""

    def __init__(self, ctx: common.CommandContext) -> None:
        self.ctx = ctx
        self.bar: Any = None
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> Any:
        if self.ctx.quiet:
            return None
        self.bar = common.progress_bar(
            self.ctx.console, disable=False, counter=None, description="{task.description:<32}"
        )
        self.bar.start()
        return self.update

    def update(self, phase: str, fraction: float) -> None:
        task = self.tasks.get(phase)
        if task is None:
            task = self.tasks[phase] = self.bar.add_task(phase, total=1.0)
        self.bar.update(task, completed=min(1.0, max(0.0, fraction)))

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def main(argv: list[str] | None = None) -> int:
    return common.execute(build_parser(), argv, _run)

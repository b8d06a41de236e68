"""``stallscope compare A_TARGET B_TARGET``: two pipelines raced in one run, their ratio with its
interval.

The rounds are measured by ``throughput.compare`` and judged by ``analysis.comparison``
(NOTE [paired comparison]); ``--fail-if-slower PCT`` makes it a CI gate: exit 1 only when
the whole interval says B is more than PCT% slower than A.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..thresholds import CONFIDENCE_LEVEL, TIE_MARGIN
from . import _common as common


def _config_argument(text: str) -> dict[str, Any]:
    """``--config``: a LoaderConfig YAML file, or inline ``num_workers=2,prefetch_factor=4``."""
    import yaml

    path = Path(text)
    if path.suffix.lower() in {".yaml", ".yml", ".json"} or path.is_file():
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text}: {exc.strerror or exc}") from None
        if isinstance(data, dict) and isinstance(data.get("config"), dict):
            data = data["config"]
        if not isinstance(data, dict):
            raise argparse.ArgumentTypeError(f"{text} does not hold a mapping of loader settings")
        return data
    data = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE,... or a YAML file, got {text!r}")
        data[key.strip()] = yaml.safe_load(value.strip())
    return data


def build_parser() -> common.ArgumentParser:
    parser = common.ArgumentParser(
        prog="stallscope compare",
        description="Measure two pipelines interleaved in one run (A B B A rounds) until the ratio"
        " of their throughput is known to --precision; report it with its interval and a verdict.",
    )
    parser.add_argument(
        "a_target", metavar="A_TARGET", help="the reference pipeline (e.g. main's make_loader)"
    )
    parser.add_argument(
        "b_target", metavar="B_TARGET", help="the changed pipeline, compared against A"
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="override both targets' batch size"
    )
    parser.add_argument(
        "--collate", default=None, metavar="MODULE:FN", help="collate function for both"
    )
    parser.add_argument(
        "--config",
        type=_config_argument,
        default=None,
        metavar="YAML|K=V,...",
        help="loader settings for both sides (default: each target's own)",
    )
    common.add_start_method_argument(parser, "multiprocessing context for both sides' workers")
    parser.add_argument(
        "--precision",
        type=float,
        default=round(100 * TIE_MARGIN, 6),
        metavar="PCT",
        help=(
            f"stop once the ratio's interval is narrower than ±PCT%% (default {100 * TIE_MARGIN:g})"
        ),
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="stop measuring after about this long even if less precise (default 60)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="steady-state seconds per window; a round is four windows (default 0.5)",
    )
    parser.add_argument(
        "--level",
        type=float,
        default=CONFIDENCE_LEVEL,
        choices=[0.90, 0.95, 0.99],
        help=f"confidence level of the interval (default {CONFIDENCE_LEVEL})",
    )
    parser.add_argument(
        "--fail-if-slower",
        type=float,
        default=None,
        metavar="PCT",
        help="exit 1 when B is slower than A by more than PCT%% over the whole interval (CI gate)",
    )
    parser.add_argument(
        "--no-stages",
        dest="stages",
        action="store_false",
        help="skip the side-by-side stage breakdown after the rounds",
    )
    common.add_batch_timeout_argument(parser)
    return parser


def _configs(args: argparse.Namespace, a: Any, b: Any) -> tuple[Any, Any]:
    from ..config import LoaderConfig

    def build(pipeline: Any) -> Any:
        base = pipeline.baseline
        if args.config is not None:
            data = {**base.to_dict(), **args.config}
            try:
                base = LoaderConfig.from_dict(data)
            except (TypeError, ValueError) as exc:
                common.fail(f"--config: {exc}.")
        if args.start_method and base.num_workers > 0:
            base = base.replace(multiprocessing_context=args.start_method)
        return base

    return build(a), build(b)


def _run(ctx: common.CommandContext) -> int:
    from ..analysis.comparison import compare_facts
    from ..target import load_target
    from ..throughput.compare import compare, rounds_for

    args = ctx.args
    if not 0 < args.precision < 100:
        common.fail("--precision must be a percentage between 0 and 100.")
    if args.budget <= 0 or args.window <= 0:
        common.fail("--budget and --window must be positive numbers of seconds.")
    if args.fail_if_slower is not None and not 0 <= args.fail_if_slower < 100:
        common.fail("--fail-if-slower must be a percentage from 0 to 100.")
    a = load_target(args.a_target, batch_size=args.batch_size, collate=args.collate)
    b = load_target(args.b_target, batch_size=args.batch_size, collate=args.collate)
    config_a, config_b = _configs(args, a, b)
    record = ctx.new_record("compare", f"{args.a_target} vs {args.b_target}")
    record.add(
        a={"target": args.a_target, "config": config_a.to_dict(), "label": config_a.label()},
        b={"target": args.b_target, "config": config_b.to_dict(), "label": config_b.label()},
    )
    precision = args.precision / 100.0

    def conclude(run: Any) -> dict[str, Any]:
        record.add(**run.to_dict())
        facts = compare_facts(
            run.rounds,
            level=args.level,
            precision=precision,
            fail_if_slower_pct=args.fail_if_slower,
        )
        record.add(**facts)
        return facts

    total = rounds_for(args.budget, args.window) * 4
    with common.progress_bar(
        ctx.console, disable=ctx.quiet, counter="{task.completed} windows"
    ) as progress:
        task = progress.add_task("comparing", total=total)
        seen: list[Any] = []

        def on_window(index: int, side: str, window: dict[str, Any]) -> None:
            seen.append(window)
            progress.update(
                task,
                advance=1,
                description=f"round {index + 1} {side.upper()}: "
                f"{window['samples_per_s']:,.0f} samples/s",
            )

        with common.keeping_partial(conclude):
            run = compare(
                a,
                b,
                config_a=config_a,
                config_b=config_b,
                precision=precision,
                level=args.level,
                budget_s=args.budget,
                window_s=args.window,
                timeout=args.timeout,
                on_window=on_window,
            )
        facts = conclude(run)
        if args.stages:
            progress.update(task, description="stage breakdown of A and B", total=None)
            record.add(stages_compared=_stage_tables(a, b, config_a, config_b))
    common.print_summary(ctx, record)
    gate = facts.get("gate") or {}
    return 1 if gate.get("failed") else 0


def _stage_tables(a: Any, b: Any, config_a: Any, config_b: Any) -> dict[str, Any]:
    """Both sides' stage tables (a short worker run each) and their differences, or why there are
    none."""
    from ..analysis.comparison import stage_differences
    from ..breakdown.probe import stages
    from ..errors import StallscopeError

    tables = {}
    for side, pipeline, config in (("a", a, config_a), ("b", b, config_b)):
        try:
            result = stages(
                pipeline,
                num_workers=max(1, min(config.num_workers, 2)),
                samples=128,
                max_seconds=3.0,
                start_method=config.multiprocessing_context,
                device="auto",
                differential=False,
                hotspots=0,
                callees=False,
            )
        except StallscopeError as exc:
            return {"error": f"the stage breakdown of {side.upper()} failed: {exc}", "rows": []}
        tables[side] = [s.to_dict() for s in result.stages]
    return {"a": tables["a"], "b": tables["b"], "rows": stage_differences(tables["a"], tables["b"])}


def main(argv: list[str] | None = None) -> int:
    return common.execute(build_parser(), argv, _run)

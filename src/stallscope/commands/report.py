"""``stallscope report RUN.json``: render a saved run record again (Markdown, HTML, plots, console).

Nothing is measured: the record written by ``--json`` is loaded and handed to
the renderers, which analyse its measurements with today's rules (advice an
older record carries is not read), so a report can be made later, elsewhere,
or in another format.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..record import RunRecord
from . import _common as common

# A record is already JSON: report writes the documents, and prints nothing else when quiet.
OUTPUTS = common.Outputs(formats=("md", "html"), quiet_help="print nothing but errors")


def build_parser() -> common.ArgumentParser:
    parser = common.command_parser(
        "stallscope report",
        "Render a run record saved with --json as Markdown, self-contained HTML, PNG plots"
        " or console text.",
        target=None,
    )
    parser.add_argument(
        "record",
        type=Path,
        metavar="RUN.json",
        help="a record written by any command's --json, or the time windows of a long run "
        "(a .jsonl file written by profile --windows-jsonl or ss.watch(windows_jsonl=...))",
    )
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="OLD.json",
        help="set the record side by side with an earlier one of the same command, "
        "each figure with its own noise",
    )
    parser.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the PNG plots into DIR (the Markdown links them from there)",
    )
    return parser


def _run(ctx: common.CommandContext) -> int:
    from ..render.console import ConsoleRenderer
    from ..render.html import HTMLRenderer
    from ..render.markdown import MarkdownRenderer
    from ..render.plots import PlotsRenderer

    args = ctx.args
    record = judged(
        _windows_record(args.record)
        if args.record.suffix == ".jsonl"
        else RunRecord.load(args.record)
    )
    if args.against is not None:
        return _against(ctx, record, judged(RunRecord.load(args.against)))
    # Not ctx.record: execute() would stamp this command's duration onto the loaded record.
    written: list[Path] = []
    try:
        if args.md is not None:
            args.md.parent.mkdir(parents=True, exist_ok=True)
            # The Markdown writes the plots it links: into --plots, else next to itself.
            written += MarkdownRenderer().write(record, args.md, plots_dir=args.plots)
        elif args.plots is not None:
            written += PlotsRenderer().write(record, args.plots)
        if args.html is not None:
            args.html.parent.mkdir(parents=True, exist_ok=True)
            written += HTMLRenderer().write(record, args.html)
    except OSError as exc:
        raise UsageError(
            f"cannot write {exc.filename or 'the report'}: {exc.strerror or exc}."
        ) from None
    if ctx.quiet:
        return 0
    if written:
        for path in written:
            ctx.console.print(f"wrote {path}", highlight=False)
    else:
        ConsoleRenderer("report").print(record, ctx.console)
    return 0


def judged(record: RunRecord) -> RunRecord:
    """``record`` with what analysis concludes from its measurements judged again by today's rules
    (a profile's verdict, its ranks compared, its memory drift: what a saved record says of them is
    not read where the measurements are there)."""
    from ..analysis.training import judged_profile

    data = record.to_dict()
    if "stall_fraction" not in data:
        return record
    return RunRecord.from_dict(judged_profile(data))


def _windows_record(path: Path) -> RunRecord:
    from ..training.windows import windows_record

    try:
        return RunRecord.from_dict(windows_record(path))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}.") from None
    except ValueError as exc:
        raise UsageError(
            f"{exc}; pass a file of time windows written by --windows-jsonl."
        ) from None


def _against(ctx: common.CommandContext, record: RunRecord, old: RunRecord) -> int:
    """``--against``: the two records side by side (console, and --md/--html when asked)."""
    from rich.markdown import Markdown

    from ..render.document_against import against_document
    from ..render.html import HTMLRenderer
    from ..render.markdown import MarkdownRenderer

    args = ctx.args
    if record.command != old.command:
        raise UsageError(
            f"{args.record} is a {record.command} record and {args.against}"
            f" a {old.command} record; --against needs two records of the same command."
        )
    doc = against_document(record, old)
    try:
        for path, writer in ((args.md, MarkdownRenderer()), (args.html, HTMLRenderer(plots=False))):
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(writer.render_document(doc, {}), encoding="utf-8")
                if not ctx.quiet:
                    ctx.console.print(f"wrote {path}", highlight=False)
    except OSError as exc:
        raise UsageError(
            f"cannot write {exc.filename or 'the report'}: {exc.strerror or exc}."
        ) from None
    if not ctx.quiet and args.md is None and args.html is None:
        ctx.console.print(Markdown(MarkdownRenderer().render_document(doc, {})))
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.execute(build_parser(), argv, _run, runs_loaders=False, outputs=OUTPUTS)

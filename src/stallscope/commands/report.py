"""``stallscope report RUN.json``: render a saved run record again (Markdown, HTML, plots, console).

Nothing is measured: the record written by ``--json`` is loaded as it is and
handed to the renderers, so a report can be made later, elsewhere, or in
another format.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UsageError
from ..record import RunRecord
from ._common import ArgumentParser, CommandContext, execute


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="stallscope report",
        description="Render a run record saved with --json as Markdown, self-contained HTML, PNG plots or console text.",
    )
    parser.add_argument("record", type=Path, metavar="RUN.json", help="a record written by any command's --json")
    parser.add_argument("--md", type=Path, default=None, metavar="PATH", help="write a Markdown report")
    parser.add_argument("--html", type=Path, default=None, metavar="PATH", help="write a self-contained HTML report")
    parser.add_argument("--plots", type=Path, default=None, metavar="DIR",
                        help="write the PNG plots into DIR (the Markdown links them from there)")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    return parser


def main(argv: list[str] | None = None) -> int:
    return execute(build_parser(), argv, _run)


def load_record(path: Path) -> RunRecord:
    """The record at ``path``, or a UsageError saying what is wrong with the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}.") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not JSON ({exc.msg} at line {exc.lineno}); pass a file written by --json.") from None
    if not isinstance(data, dict) or "command" not in data:
        raise UsageError(f"{path} is not a stallscope run record; pass a file written by --json.")
    try:
        return RunRecord.from_dict(data)
    except (KeyError, ValueError) as exc:
        raise UsageError(f"{path}: {exc}.") from None


def _run(ctx: CommandContext) -> int:
    from ..render.html import HTMLRenderer
    from ..render.markdown import MarkdownRenderer
    from ..render.plots import render_plots

    args = ctx.args
    record = load_record(args.record)
    # Not ctx.record: execute() would stamp this command's duration onto the loaded record.
    written: list[Path] = []
    try:
        if args.md is not None:
            args.md.parent.mkdir(parents=True, exist_ok=True)
            # The Markdown writes the plots it links: into --plots, else next to itself.
            written += MarkdownRenderer().write(record, args.md, plots_dir=args.plots)
            written.append(args.md)
        elif args.plots is not None:
            written += render_plots(record, args.plots)
        if args.html is not None:
            args.html.parent.mkdir(parents=True, exist_ok=True)
            HTMLRenderer().write(record, args.html)
            written.append(args.html)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename or 'the report'}: {exc.strerror or exc}.") from None
    if ctx.quiet:
        return 0
    if written:
        for path in written:
            ctx.console.print(f"wrote {path}", highlight=False)
    else:
        from rich.markdown import Markdown

        ctx.console.print(Markdown(MarkdownRenderer().render(record)))
    return 0

"""Console output of a record: the one path every command and ``stallscope report`` print through.

Two views of the same record. ``summary`` is what a command prints when it ends, chosen by the
record's ``command``: its own tables (``console_bench``, ``console_tune``, ``console_check``,
``console_stages``, ``console_profile``), after the run's one verdict where it has one
(``bench``, ``tune``); a ``doctor`` record prints the verdict, then every section it holds as the
evidence, then any step that failed. ``report`` is the whole report document (the
Markdown one, shown by rich), what ``stallscope report RUN.json`` prints when asked for no file.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from ..analysis.readers import as_record_dict
from .console_advice import render_verdict
from .console_attach import render_attach
from .console_bench import render_bench
from .console_ceiling import render_ceiling
from .console_changes import render_code_changes
from .console_check import render_check
from .console_compare import render_compare
from .console_profile import render_profile
from .console_stages import render_stages
from .console_tune import render_tune

Section = Callable[[dict[str, Any], Console], None]

# command -> the console section that command prints (doctor prints all it has, in this order,
# each when the record holds its key).
SECTIONS: dict[str, Section] = {
    "check": render_check,
    "bench": render_bench,
    "stages": render_stages,
    "tune": render_tune,
    "profile": render_profile,
    "compare": render_compare,
    "attach": render_attach,
}
_SECTION_KEYS = {
    "check": "findings",
    "bench": "results",
    "stages": "stages",
    "tune": "best",
    "profile": "stall_fraction",
    "compare": "ratio",
    "attach": "attach_capture",
}

VIEWS = ("summary", "report")


class ConsoleRenderer:
    """``print(record, console)`` to a rich console; ``render(record)`` as plain text; ``write`` to
    a file."""

    def __init__(self, view: str = "summary", *, width: int = 140) -> None:
        if view not in VIEWS:
            raise ValueError(f"unknown console view {view!r}; choose one of {', '.join(VIEWS)}")
        self.view = view
        self.width = width

    def print(self, record: Any, console: Console) -> None:
        data = as_record_dict(record)
        if self.view == "report":
            from rich.markdown import Markdown

            from .markdown import MarkdownRenderer

            console.print(Markdown(MarkdownRenderer().render(data)))
        elif data.get("command") in SECTIONS:
            if data["command"] in ("tune", "bench"):
                render_verdict(data, console)
            SECTIONS[data["command"]](data, console)
            render_ceiling(data, console)
        else:
            _print_everything(data, console)

    def render(self, record: Any) -> str:
        buffer = io.StringIO()
        console = Console(
            file=buffer, width=self.width, color_system=None, highlight=False, force_terminal=False
        )
        self.print(record, console)
        return buffer.getvalue()

    def write(self, record: Any, path: Path) -> list[Path]:
        path = Path(path)
        path.write_text(self.render(record), encoding="utf-8")
        return [path]


def _print_everything(data: dict[str, Any], console: Console) -> None:
    """A doctor record: the verdict first, then every section it holds (the evidence), then the
    steps that failed."""
    render_verdict(data, console)
    for command, section in SECTIONS.items():
        if _SECTION_KEYS[command] not in data:
            continue
        if command != "check":
            console.print()
        section(data, console)
    if "code_changes" in data or "code_changes_run" in data:
        console.print()
        render_code_changes(data, console)
    render_ceiling(data, console)
    for failure in data.get("step_failures", []):
        console.print(f"[red]{failure['step']} failed:[/] {failure['message']}")
    for item in data.get("not_run", []):
        console.print(f"[yellow]not run: {item['step']}[/] — {item['why']}.")

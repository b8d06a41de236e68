"""Renderers: a run record in, text or files out; they never compute (facts come from ``analysis``).

Every renderer implements :class:`Renderer`: ``render(record)`` returns the output (text; the plots
return PNG bytes by name) and ``write(record, path)`` writes it and returns every file written. One
module each: ``console`` (every command's summary and ``stallscope report``'s console text, via the
``console_*`` sections), ``json_renderer``, ``markdown`` and ``html`` (both serialise the document
``report_document`` builds, out of ``document_*``), ``plots`` (PNG). ``report_format`` prints
numbers for the documents. They are chosen by name or by file extension (:func:`write_report`).
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any, Protocol

from ..record import RunRecord


class Renderer(Protocol):
    def render(self, record: RunRecord | dict[str, Any]) -> Any:
        """The output for one record, in memory."""

    def write(self, record: RunRecord | dict[str, Any], path: Path) -> list[Path]:
        """Write the output at ``path``; return every file written."""


# format name -> (module, class)
RENDERERS = {
    "json": ("json_renderer", "JSONRenderer"),
    "md": ("markdown", "MarkdownRenderer"),
    "html": ("html", "HTMLRenderer"),
    "console": ("console", "ConsoleRenderer"),
    "plots": ("plots", "PlotsRenderer"),
}
_EXTENSIONS = {
    ".json": "json",
    ".md": "md",
    ".markdown": "md",
    ".html": "html",
    ".htm": "html",
    ".txt": "console",
}


def renderer_for(fmt: str) -> Renderer:
    module_name, class_name = RENDERERS[fmt]
    module = import_module(f".{module_name}", __name__)
    renderer: Renderer = getattr(module, class_name)()
    return renderer


def format_for_path(path: Path) -> str | None:
    return _EXTENSIONS.get(path.suffix.lower())


def write_report(record: RunRecord, path: Path, *, fmt: str | None = None) -> list[Path]:
    """Write ``record`` at ``path`` in ``fmt`` (default: by the file's extension); the files
    written."""
    fmt = fmt or format_for_path(path)
    if fmt is None:
        raise ValueError(f"cannot tell the report format of {path}; use .json, .md or .html")
    path.parent.mkdir(parents=True, exist_ok=True)
    return renderer_for(fmt).write(record, path)

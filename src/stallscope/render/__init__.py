"""Renderers: one module each, one ``render(record) -> str`` entry, chosen by name or file extension."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from ..record import RunRecord

# format name -> (module, class)
RENDERERS = {
    "json": ("json_renderer", "JSONRenderer"),
    "md": ("markdown", "MarkdownRenderer"),
    "html": ("html", "HTMLRenderer"),
}
_EXTENSIONS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}


def renderer_for(fmt: str):
    module_name, class_name = RENDERERS[fmt]
    module = import_module(f".{module_name}", __name__)
    return getattr(module, class_name)()


def format_for_path(path: Path) -> str | None:
    return _EXTENSIONS.get(path.suffix.lower())


def write_report(record: RunRecord, path: Path, *, fmt: str | None = None) -> None:
    fmt = fmt or format_for_path(path)
    if fmt is None:
        raise ValueError(f"cannot tell the report format of {path}; use .json, .md or .html")
    path.parent.mkdir(parents=True, exist_ok=True)
    renderer = renderer_for(fmt)
    renderer.write(record, path)

"""Markdown: the report an engineer would write by hand, from the same document as the HTML."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from . import document_model as dm
from .report_document import build_document

STATUS_MARKS = {"pass": "✅ pass", "warn": "⚠️ warn", "fail": "❌ fail", "info": "ℹ️ info"}
_ALWAYS = re.compile(r"([\\`*<|~])")
_EDGE_UNDERSCORE = re.compile(
    r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])"
)  # intraword "_" never emphasises
_LINK_CLOSE = re.compile(r"\](?=[(\[:])")
_LINE_START = re.compile(r"^(\s*)([-+>#]|\d+[.)])(\s|$)")


def escape(text: str) -> str:
    """Escape Markdown syntax in text from the record (CommonMark backslash escapes).

    Only what would change the meaning is escaped, so the raw Markdown stays readable.
    """
    text = re.sub(r"\s+", " ", str(text))
    text = _ALWAYS.sub(r"\\\1", text)
    text = _EDGE_UNDERSCORE.sub(r"\\_", text)
    text = _LINK_CLOSE.sub(r"\\]", text)
    # A leading "-", "+", ">", "#" or "1." would start a list, quote or heading.
    return _LINE_START.sub(
        lambda m: f"{m.group(1)}{m.group(2)[:-1]}\\{m.group(2)[-1]}{m.group(3)}", text
    )


def code_span(text: str) -> str:
    text = re.sub(r"\s+", " ", str(text))
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


class MarkdownRenderer(dm.DocumentWriter):
    """``render(record)`` returns the Markdown; ``write`` also writes the plots it links."""

    def render(self, record: Any, *, images: dict[str, str] | None = None) -> str:
        """The report; ``images`` maps plot names to the paths the Markdown links (no figures
        without)."""
        return self.render_document(build_document(record), images or {})

    def render_document(self, doc: dm.Document, images: dict[str, str]) -> str:
        lines = [f"# {escape(doc.title)}", ""]
        for block in doc.intro:
            lines += self.block(block, images)
        for section in doc.sections:
            lines += self._section(section, images, level=2)
        return "\n".join(lines).rstrip() + "\n"

    def write(
        self, record: Any, path: Path, *, plots: bool = True, plots_dir: Path | None = None
    ) -> list[Path]:
        """Write ``path``; with ``plots``, the PNGs it links go to ``plots_dir`` (default
        ``<stem>_plots/``).

        Returns the files written: the Markdown, then the plots.
        """
        from .plots import render_plots

        path = Path(path)
        images: dict[str, str] = {}
        written: list[Path] = []
        if plots:
            folder = (
                Path(plots_dir) if plots_dir is not None else path.parent / f"{path.stem}_plots"
            )
            written = render_plots(record, folder)
            for png in written:
                images[png.stem] = Path(
                    os.path.relpath(png.resolve(), path.parent.resolve())
                ).as_posix()
        path.write_text(self.render(record, images=images), encoding="utf-8")
        return [path, *written]

    def _section(self, section: dm.Section, images: dict[str, str], *, level: int) -> list[str]:
        lines = [f"{'#' * level} {escape(section.title)}", ""]
        for block in section.blocks:
            lines += self.block(block, images)
        for sub in section.subsections:
            lines += self._section(sub, images, level=level + 1)
        return lines

    # -- blocks (DocumentWriter picks which) --
    def paragraph(self, block: dm.Paragraph) -> list[str]:
        text = self.inline(block.parts)
        return [f"> {text}" if block.style.startswith("verdict") else text, ""]

    def bullets(self, block: dm.Bullets) -> list[str]:
        return [f"- {self.inline(item)}" for item in block.items] + [""]

    def code_block(self, block: dm.CodeBlock) -> list[str]:
        fence = "```"
        while fence in block.text:
            fence += "`"
        return [f"{fence}{block.language}", block.text, fence, ""]

    def figure(self, block: dm.Figure, image: str | None) -> list[str]:
        return [] if image is None else [f"![{escape(block.caption)}]({image})", ""]

    def table(self, table: dm.Table) -> list[str]:
        def cell(value: Any) -> str:
            return self.cell(value) or " "

        align = table.align.ljust(len(table.headers), "l")
        lines = [
            "| " + " | ".join(escape(h) for h in table.headers) + " |",
            "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |",
        ]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows]
        return lines + [""]

    # -- inline parts --
    def text(self, text: Any) -> str:
        return escape(text)

    def code(self, text: str) -> str:
        return code_span(text)

    def strong(self, text: str) -> str:
        return f"**{escape(text)}**"

    def status(self, value: str) -> str:
        return STATUS_MARKS.get(value, escape(value))

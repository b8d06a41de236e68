"""HTML: one self-contained file (inline CSS, plots as data: URIs, no network), opens offline.

Serialises the same document as the Markdown renderer; everything taken from
the record is escaped.
"""

from __future__ import annotations

import base64
from html import escape as _escape
from pathlib import Path
from typing import Any

from . import document_model as dm
from .report_document import build_document

STATUS_TEXT = {"pass": "✔ pass", "warn": "▲ warn", "fail": "✖ fail", "info": "● info"}

CSS = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d8dee4; --soft: #f6f8fa; --accent: #2f6db5;
        --pass: #1a7f37; --warn: #9a6700; --fail: #cf222e; --info: #0969da; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #ffffff;
       font: 15px/1.55 -apple-system, "Segoe UI", "Helvetica Neue", Helvetica, Arial, sans-serif; }
header { background: #22303f; color: #f3f5f7; padding: 28px 0 20px; }
header .wrap p { color: #c9d2dc; margin: 6px 0; }
header code { background: rgba(255,255,255,0.12); color: #ffffff; }
.wrap { max-width: 1080px; margin: 0 auto; padding: 0 28px; }
h1 { margin: 0 0 8px; font-size: 28px; font-weight: 650; }
h2 { margin: 36px 0 12px; padding-bottom: 6px; border-bottom: 1px solid var(--line); \
font-size: 21px; }
h3 { margin: 24px 0 8px; font-size: 17px; }
nav { margin: 18px 0 0; display: flex; flex-wrap: wrap; gap: 6px 14px; font-size: 13px; }
nav a { color: #9cc3ef; text-decoration: none; }
nav a:hover { text-decoration: underline; }
main { padding-bottom: 48px; }
p { margin: 10px 0; }
code { font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
       background: var(--soft); padding: 1px 5px; border-radius: 4px; }
pre { background: var(--soft); border: 1px solid var(--line); border-radius: 6px; \
padding: 12px 14px;
      overflow-x: auto; }
pre code { background: none; padding: 0; }
table { border-collapse: collapse; width: 100%; margin: 12px 0 16px; font-size: 14px; }
th, td { border-bottom: 1px solid var(--line); padding: 6px 10px; text-align: left; \
vertical-align: top; }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fbfcfd; }
ul { padding-left: 22px; }
li { margin: 4px 0; }
.verdict { border-left: 5px solid var(--info); background: #eef5fd; padding: 12px 16px; \
border-radius: 0 6px 6px 0;
           font-size: 16px; }
.verdict.unsafe, .verdict.input-bound { border-color: var(--fail); background: #fdf0f1; }
.verdict.loader-limited, .verdict.balanced, .verdict.stage-bound, .verdict.switch { \
border-color: var(--warn);
background: #fdf7e7; }
.verdict.near-optimal, .verdict.compute-bound, .verdict.no-errors, .verdict.keep-yours { \
border-color: var(--pass);
background: #eef8f1; }
.status { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; \
font-weight: 600;
          white-space: nowrap; color: #ffffff; }
.status.pass { background: var(--pass); } .status.warn { background: var(--warn); }
.status.fail { background: var(--fail); } .status.info { background: var(--info); }
figure { margin: 16px 0 22px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
@media print { header { background: none; color: var(--ink); } \
header .wrap p { color: var(--ink); } nav { display: none; } }
"""


def esc(text: Any) -> str:
    return _escape(str(text), quote=True)


class HTMLRenderer(dm.DocumentWriter):
    """``render(record)`` returns one self-contained HTML page; plots are embedded as base64
    PNGs."""

    def __init__(self, plots: bool = True) -> None:
        self.plots = plots

    def render(self, record: Any) -> str:
        doc = build_document(record)
        images: dict[str, str] = {}
        if self.plots:
            from .plots import plot_png

            for figure in doc.figures():
                png = plot_png(figure.name, record)
                if png is not None:
                    images[figure.name] = "data:image/png;base64," + base64.b64encode(png).decode(
                        "ascii"
                    )
        return self.render_document(doc, images)

    def write(self, record: Any, path: Path) -> list[Path]:
        path = Path(path)
        path.write_text(self.render(record), encoding="utf-8")
        return [path]

    def render_document(self, doc: dm.Document, images: dict[str, str]) -> str:
        intro = "".join(self.block(b, images) for b in doc.intro)
        nav = "".join(f'<a href="#{esc(s.key)}">{esc(s.title)}</a>' for s in doc.sections)
        body = "".join(self._section(s, images, level=2) for s in doc.sections)
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(doc.title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<header><div "
            f'class="wrap"><h1>{esc(doc.title)}</h1>{intro}<nav>{nav}</nav></div></header>\n'
            f'<main><div class="wrap">{body}</div></main>\n'
            "</body>\n</html>\n"
        )

    def _section(self, section: dm.Section, images: dict[str, str], *, level: int) -> str:
        inner = "".join(self.block(b, images) for b in section.blocks)
        inner += "".join(self._section(s, images, level=level + 1) for s in section.subsections)
        return (
            "<section "
            f'id="{esc(section.key)}"><h{level}>{esc(section.title)}</h{level}>{inner}</section>\n'
        )

    # -- blocks (DocumentWriter picks which) --
    def paragraph(self, block: dm.Paragraph) -> str:
        cls = f' class="{esc(block.style)}"' if block.style else ""
        return f"<p{cls}>{self.inline(block.parts)}</p>\n"

    def bullets(self, block: dm.Bullets) -> str:
        return "<ul>" + "".join(f"<li>{self.inline(item)}</li>" for item in block.items) + "</ul>\n"

    def code_block(self, block: dm.CodeBlock) -> str:
        return f"<pre><code>{esc(block.text)}</code></pre>\n"

    def figure(self, block: dm.Figure, image: str | None) -> str:
        if image is None:
            return ""
        return (
            f'<figure><img src="{image}" alt="{esc(block.caption)}">'
            f"<figcaption>{esc(block.caption)}</figcaption></figure>\n"
        )

    def table(self, table: dm.Table) -> str:
        align = table.align.ljust(len(table.headers), "l")

        def cls(i: int) -> str:
            return ' class="r"' if align[i] == "r" else ""

        head = "".join(f"<th{cls(i)}>{esc(h)}</th>" for i, h in enumerate(table.headers))
        rows = "".join(
            "<tr>"
            + "".join(f"<td{cls(i)}>{self.cell(v)}</td>" for i, v in enumerate(row))
            + "</tr>"
            for row in table.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>\n"

    # -- inline parts --
    def text(self, text: Any) -> str:
        return esc(text)

    def code(self, text: str) -> str:
        return f"<code>{esc(text)}</code>"

    def strong(self, text: str) -> str:
        return f"<strong>{esc(text)}</strong>"

    def status(self, value: str) -> str:
        return f'<span class="status {esc(value)}">{esc(STATUS_TEXT.get(value, value))}</span>'

"""The report as a small document model: paragraphs, tables, figures and sections of inline parts.

``report_document`` builds one from the analysis facts; the Markdown and HTML renderers serialise
it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, Union

R = TypeVar("R")


@dataclass
class Code:
    """Inline code (a config label, an argument)."""

    text: str


@dataclass
class Strong:
    text: str


Inline = Union[str, Code, Strong]
Text = list[Inline]


@dataclass
class Status:
    """A checklist mark: pass, warn or fail."""

    value: str


Cell = Union[str, Code, Strong, Status, Text]


@dataclass
class Paragraph:
    parts: Text
    style: str = ""  # "verdict <label>" marks the executive verdict


@dataclass
class Bullets:
    items: list[Text]


@dataclass
class Table:
    headers: list[str]
    rows: Sequence[Sequence[Cell]]
    align: str = ""  # one letter per column: l or r (default l)


@dataclass(frozen=True)
class Column(Generic[R]):
    """A table column: its header, the cell it shows for a row, and its alignment (l or r)."""

    header: str
    cell: Callable[[R], Cell]
    align: str = "l"


def table(
    rows: Iterable[R], columns: Sequence[Column[R]], *, footer: Sequence[Cell] | None = None
) -> Table:
    """A table of one line per row, each column's cell taken from it (then ``footer``, a line of
    cells as they stand, such as a total)."""
    lines: list[Sequence[Cell]] = [[column.cell(row) for column in columns] for row in rows]
    if footer is not None:
        lines.append(footer)
    return Table(
        [column.header for column in columns], lines, "".join(column.align for column in columns)
    )


@dataclass
class CodeBlock:
    text: str
    language: str = ""


@dataclass
class Figure:
    name: str  # plots.PLOTS key
    caption: str


Block = Union[Paragraph, Bullets, Table, CodeBlock, Figure]


@dataclass
class Section:
    key: str  # anchor id
    title: str
    blocks: list[Block] = field(default_factory=list)
    subsections: list[Section] = field(default_factory=list)


@dataclass
class Document:
    title: str
    intro: list[Block]
    sections: list[Section]

    def figures(self) -> list[Figure]:
        found: list[Figure] = []

        def walk(section: Section) -> None:
            found.extend(b for b in section.blocks if isinstance(b, Figure))
            for sub in section.subsections:
                walk(sub)

        for section in self.sections:
            walk(section)
        return found


def record_text(text: Any) -> Text:
    """A string from the record, with its `backtick` spans as inline code."""
    pieces = str(text).split("`")
    if len(pieces) % 2 == 0:  # unbalanced backticks: keep the text as it is
        return [str(text)]
    return [Code(p) if i % 2 else p for i, p in enumerate(pieces) if p]


class DocumentWriter:
    """What the Markdown and HTML writers share: which method writes which block or inline part.

    A writer supplies ``paragraph``, ``bullets``, ``table``, ``code_block`` and ``figure`` (given
    the image the figure shows, or None) for blocks, and ``text``, ``code``, ``strong`` and
    ``status`` for inline parts.
    """

    paragraph: Callable[[Paragraph], Any]
    bullets: Callable[[Bullets], Any]
    table: Callable[[Table], Any]
    code_block: Callable[[CodeBlock], Any]
    figure: Callable[[Figure, str | None], Any]
    text: Callable[[Any], str]
    code: Callable[[str], str]
    strong: Callable[[str], str]
    status: Callable[[str], str]

    def block(self, block: Any, images: dict[str, str]) -> Any:
        if isinstance(block, Paragraph):
            return self.paragraph(block)
        if isinstance(block, Bullets):
            return self.bullets(block)
        if isinstance(block, Table):
            return self.table(block)
        if isinstance(block, CodeBlock):
            return self.code_block(block)
        if isinstance(block, Figure):
            return self.figure(block, images.get(block.name))
        raise TypeError(f"unknown block {type(block).__name__}")

    def inline(self, parts: Sequence[Any]) -> str:
        out: list[str] = []
        for part in parts:
            if isinstance(part, Code):
                out.append(self.code(part.text))
            elif isinstance(part, Strong):
                out.append(self.strong(part.text))
            elif isinstance(part, Status):
                out.append(self.status(part.value))
            elif isinstance(part, list):
                out.append(self.inline(part))
            else:
                out.append(self.text(part))
        return "".join(out)

    def cell(self, value: Any) -> str:
        """One table cell: an inline part or a list of them."""
        return self.inline(value if isinstance(value, list) else [value])


def config_code(label: str) -> Code:
    return Code(label)


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]

"""The console summaries' tables: a title over the left edge and columns given as the report
documents give theirs (``document_model.Table``), headers and one alignment letter each; a
document's own table prints here as it stands."""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from . import document_model as dm


def titled_table(title: str, headers: Sequence[str], align: str = "") -> Table:
    """An empty table titled ``title``; ``align`` has one letter per header, ``l`` or ``r`` (a
    missing letter is ``l``)."""
    table = Table(title=title, title_justify="left")
    for header, letter in zip(headers, align.ljust(len(headers), "l")):
        table.add_column(header, justify="right" if letter == "r" else "left")
    return table


def document_table(doc_table: dm.Table, title: str) -> Table:
    """A report document's table as a console table, its cells as :func:`plain` text."""
    table = titled_table(title, doc_table.headers, doc_table.align)
    for row in doc_table.rows:
        table.add_row(*[plain(cell if isinstance(cell, list) else [cell]) for cell in row])
    return table


def plain(parts: Sequence[dm.Cell]) -> str:
    """Inline document parts as console text (markup escaped)."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, (dm.Code, dm.Strong)):
            out.append(part.text)
        elif isinstance(part, list):
            out.append(plain(part))
        else:
            out.append(str(part))
    return escape("".join(out))

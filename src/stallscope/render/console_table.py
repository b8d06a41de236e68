"""The console summaries' tables: a title over the left edge and columns given as the report
documents give theirs (``document_model.Table``), headers and one alignment letter each."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table


def titled_table(title: str, headers: Sequence[str], align: str = "") -> Table:
    """An empty table titled ``title``; ``align`` has one letter per header, ``l`` or ``r`` (a
    missing letter is ``l``)."""
    table = Table(title=title, title_justify="left")
    for header, letter in zip(headers, align.ljust(len(headers), "l")):
        table.add_column(header, justify="right" if letter == "r" else "left")
    return table

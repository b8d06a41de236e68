"""Small text helpers every layer may use (analysis writes sentences, the renderers print them)."""

from __future__ import annotations


def plural(count: int | None, noun: str) -> str:
    """``1 round``, ``2 rounds``, ``0 rounds``: the count and the noun it agrees with."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

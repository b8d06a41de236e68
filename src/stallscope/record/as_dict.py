"""The record form of a probe's or a rule's result: a dataclass written as its fields."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class AsDict:
    """Base of a result dataclass whose ``to_dict`` is :func:`dataclasses.asdict` (nested
    dataclasses, lists and dicts copied as plain dicts and lists)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

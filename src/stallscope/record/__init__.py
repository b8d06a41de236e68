"""The run record: what a command measured, as plain JSON-able data (schema §5).

Probes fill a :class:`RunRecord`; analysis and renderers only read it. A
record saved with ``--json`` can be loaded again and rendered later
(``stallscope report run.json --html out.html``). Every key a command writes is
declared by a section in :mod:`.sections` (typed dataclasses with defaults for
older records); ``schema/record-v1.json`` describes the same keys.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .. import __version__
from ..errors import UsageError
from .base import Section
from .sections import DERIVED_KEYS, SECTIONS, declared_keys

__all__ = [
    "DERIVED_KEYS",
    "HEADER_KEYS",
    "SCHEMA_VERSION",
    "SECTIONS",
    "RunRecord",
    "Section",
    "UndeclaredKeyError",
    "declared_keys",
    "plain",
]

S = TypeVar("S", bound=Section)

SCHEMA_VERSION = 1


def plain(obj: Any) -> Any:
    """Convert dataclasses, numpy scalars, paths and tuples into JSON-able data."""
    if hasattr(obj, "to_dict") and not isinstance(obj, type):
        return plain(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [plain(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    item = getattr(obj, "item", None)
    if callable(item):  # numpy / torch scalars
        return plain(item())
    return str(obj)


HEADER_KEYS = (
    "schema",
    "tool_version",
    "command",
    "target",
    "argv",
    "host",
    "started_at",
    "duration_s",
    "partial",
)


class UndeclaredKeyError(ValueError):
    """A record key that no section in ``record/sections.py`` declares."""


def _check_key(key: str, known: Mapping[str, str]) -> None:
    if key in HEADER_KEYS:
        raise UndeclaredKeyError(
            f"record key {key!r} is part of the record's header, not a section; "
            "set the RunRecord field instead"
        )
    if key not in known:
        raise UndeclaredKeyError(
            f"record key {key!r} is declared by no record section; declare it in "
            "stallscope/record/sections.py and schema/record-v1.json first"
        )


@dataclass
class RunRecord:
    """One command's results. ``sections`` hold the command-specific keys of §5, each declared by
    a section in :mod:`stallscope.record.sections`; :meth:`section` reads them typed."""

    command: str
    target: str
    host: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    duration_s: float | None = None
    partial: bool = False
    tool_version: str = __version__
    argv: list[str] = field(default_factory=list)  # the command line that made the record

    def add(self, **sections: Any) -> None:
        """Set section keys; a key no section declares is an error (a probe cannot invent one)."""
        known = declared_keys()
        for key in sections:
            _check_key(key, known)
        self.sections.update({k: plain(v) for k, v in sections.items()})

    def section(self, kind: type[S]) -> S:
        """The typed section ``kind`` read from this record (missing keys take its defaults)."""
        return kind.from_dict(self.sections)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "tool_version": self.tool_version,
            "command": self.command,
            "target": self.target,
            "argv": list(self.argv),
            "host": plain(self.host),
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "partial": self.partial,
        }
        data.update(plain(self.sections))
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        """The record of a ``to_dict`` (or ``--json``) dict, older ones included: a header key an
        older record lacks takes a default; a key of DERIVED_KEYS is dropped (analysis recomputes
        it); any other key no section declares is an error naming it."""
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(
                f"unsupported record schema {data.get('schema')!r} "
                f"(this stallscope reads {SCHEMA_VERSION})"
            )
        known = declared_keys()
        sections: dict[str, Any] = {}
        for key, value in data.items():
            if key in HEADER_KEYS or key in DERIVED_KEYS:
                continue
            _check_key(key, known)
            sections[key] = value
        argv = data.get("argv")
        host = data.get("host")
        started = data.get("started_at")
        duration = data.get("duration_s")
        return cls(
            command=str(data["command"]),
            target=str(data["target"]),
            host=dict(host) if isinstance(host, Mapping) else {},
            sections=sections,
            started_at=float(started) if isinstance(started, (int, float)) else 0.0,
            duration_s=float(duration) if isinstance(duration, (int, float)) else None,
            partial=bool(data.get("partial", False)),
            tool_version=str(data.get("tool_version", "?")),
            argv=[str(a) for a in argv] if isinstance(argv, list) else [],
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> RunRecord:
        """The record saved at ``path``, or a UsageError saying in one sentence what is wrong with
        the file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}.") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{path} is not JSON ({exc.msg} at line {exc.lineno}); "
                "pass a file written by --json."
            ) from None
        if not isinstance(data, dict) or "command" not in data:
            raise UsageError(
                f"{path} is not a stallscope run record; pass a file written by --json."
            )
        try:
            return cls.from_dict(data)
        except (KeyError, ValueError) as exc:
            raise UsageError(f"{path}: {exc}.") from None

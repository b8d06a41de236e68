"""The run record: what a command measured, as plain JSON-able data (schema §5).

Probes fill a :class:`RunRecord`; analysis and renderers only read it. A
record saved with ``--json`` can be loaded again and rendered later
(``stallscope report run.json --html out.html``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__
from .errors import UsageError

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


@dataclass
class RunRecord:
    """One command's results. ``sections`` hold the command-specific keys of §5."""

    command: str
    target: str
    host: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    duration_s: float | None = None
    partial: bool = False
    tool_version: str = __version__

    def add(self, **sections: Any) -> None:
        self.sections.update({k: plain(v) for k, v in sections.items()})

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "tool_version": self.tool_version,
            "command": self.command,
            "target": self.target,
            "host": plain(self.host),
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "partial": self.partial,
        }
        data.update(plain(self.sections))
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(
                f"unsupported record schema {data.get('schema')!r} (this stallscope reads {SCHEMA_VERSION})"
            )
        fixed = {
            "schema",
            "tool_version",
            "command",
            "target",
            "host",
            "started_at",
            "duration_s",
            "partial",
        }
        return cls(
            command=data["command"],
            target=data["target"],
            host=data.get("host", {}),
            sections={k: v for k, v in data.items() if k not in fixed},
            started_at=data.get("started_at", 0.0),
            duration_s=data.get("duration_s"),
            partial=bool(data.get("partial", False)),
            tool_version=data.get("tool_version", "?"),
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> RunRecord:
        """The record saved at ``path``, or a UsageError saying in one sentence what is wrong with the file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}.") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{path} is not JSON ({exc.msg} at line {exc.lineno}); pass a file written by --json."
            ) from None
        if not isinstance(data, dict) or "command" not in data:
            raise UsageError(
                f"{path} is not a stallscope run record; pass a file written by --json."
            )
        try:
            return cls.from_dict(data)
        except (KeyError, ValueError) as exc:
            raise UsageError(f"{path}: {exc}.") from None

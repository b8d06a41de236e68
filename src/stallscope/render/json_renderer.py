"""JSON: the run record (schema §5), with the verdict analysis derives from it as its
``analysis`` block (NOTE [one verdict] in analysis/run_verdict.py), for readers such as CI jobs;
loading the file drops that block and ``report`` recomputes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..analysis.run_verdict import decide
from ..record import RunRecord


def with_analysis(record: RunRecord | dict[str, Any]) -> dict[str, Any]:
    """The record's dict with today's ``analysis`` block (any older one replaced)."""
    data = dict(record) if isinstance(record, dict) else record.to_dict()
    data.pop("analysis", None)
    data["analysis"] = decide(data).to_dict()
    return data


class JSONRenderer:
    def render(self, record: RunRecord | dict[str, Any]) -> str:
        return json.dumps(with_analysis(record), indent=2) + "\n"

    def write(self, record: RunRecord | dict[str, Any], path: Path) -> list[Path]:
        if isinstance(record, dict):
            record = RunRecord.from_dict(record)  # a key no section declares is refused here
        Path(path).write_text(self.render(record), encoding="utf-8")
        return [Path(path)]

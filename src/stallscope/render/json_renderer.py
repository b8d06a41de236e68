"""JSON: the run record as-is (schema §5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..record import RunRecord


class JSONRenderer:
    def render(self, record: RunRecord | dict[str, Any]) -> str:
        data = record if isinstance(record, dict) else record.to_dict()
        return json.dumps(data, indent=2) + "\n"

    def write(self, record: RunRecord | dict[str, Any], path: Path) -> list[Path]:
        if isinstance(record, dict):
            record = RunRecord.from_dict(record)
        record.save(path)
        return [Path(path)]

"""JSON: the run record as-is (schema §5)."""

from __future__ import annotations

import json
from pathlib import Path

from ..record import RunRecord


class JSONRenderer:
    def render(self, record: RunRecord) -> str:
        return json.dumps(record.to_dict(), indent=2) + "\n"

    def write(self, record: RunRecord, path: Path) -> None:
        path.write_text(self.render(record))

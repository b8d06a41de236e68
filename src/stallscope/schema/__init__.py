"""The JSON schema of run records (SPEC §5), shipped with the package."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def record_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(
        resources.files(__name__).joinpath("record-v1.json").read_text()
    )
    return schema

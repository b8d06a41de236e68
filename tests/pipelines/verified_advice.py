"""The advice ``add_verified_advice`` records for a pick that changes some of a target's knobs: a
record with the target's loader, kind and baseline, and that pick as its best."""

from __future__ import annotations

from typing import Any

from stallscope.commands._common import add_verified_advice
from stallscope.record import RunRecord
from stallscope.target import load_target


def verified_advice(target: Any, **knobs: Any) -> dict[str, Any]:
    """``loader_code`` for ``target`` (a TARGET spec or callable) with ``knobs`` changed."""
    pipeline = load_target(target)
    name = target if isinstance(target, str) else target.__name__
    record = RunRecord(command="tune", target=name, host={})
    pick = pipeline.baseline.replace(**knobs)
    record.add(
        loader=pipeline.call.to_dict(),
        loader_kind=pipeline.kind.to_dict(),
        baseline={"config": pipeline.baseline.to_dict(), "samples_per_s": 100.0},
        best={
            "config": pick.to_dict(),
            "samples_per_s": 150.0,
            "speedup": 1.5,
            "rounds": 4,
            "confidence": 0.97,
        },
    )
    add_verified_advice(record, pipeline)
    return record.sections["loader_code"]

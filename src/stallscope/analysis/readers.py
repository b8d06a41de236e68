"""Small readers of a run record (schema §5): numbers, rates, labels and the results worth reading.

A section's top-level keys are read through its typed section (``stallscope.record.sections``),
and the items below them (a bench result, the tuner's pick, a trial) through ``record.model``;
both give a key an older record lacks its default. What stays here guards values that stay plain
JSON (a config's fields, a section the model does not type), which older records wrote in other
shapes: a missing field, a NaN, a bool where a number belongs yields ``None``, not an exception.
"""

from __future__ import annotations

import math
from typing import Any

from ..record.model import BenchResult, results_of

Record = dict[str, Any]  # a RunRecord.to_dict()

MIB = 1024 * 1024  # resources.py reports memory in MiB ("MB" there)


def as_record_dict(record: Any) -> Record:
    """A RunRecord or its dict, as a dict."""
    if isinstance(record, dict):
        return record
    to_dict = getattr(record, "to_dict", None)
    if callable(to_dict):
        as_dict: Record = to_dict()
        return as_dict
    raise TypeError(f"expected a RunRecord or a record dict, got {type(record).__name__}")


def number(value: Any) -> float | None:
    """A finite int/float as float; anything else (None, bool, str, NaN) as None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def recorded_mean(r: Record, key: str) -> float | None:
    """The ``mean`` of the statistics a record keeps under ``key`` (``data_ms``, ``compute_ms``)."""
    stats = r.get(key)
    return number(stats.get("mean")) if isinstance(stats, dict) else None


def mapping(value: Any) -> dict[str, Any]:
    """A dict value as it is; anything else (None, a list from an older writer) as {}."""
    return value if isinstance(value, dict) else {}


def rate_of(value: Any) -> float | None:
    """samples/s given either as a number or as a {median, min, max} spread."""
    if isinstance(value, dict):
        return number(value.get("median"))
    return number(value)


def config_label(config: Any, label: Any = None) -> str:
    """The record's label, else LoaderConfig.label() of the config dict."""
    if isinstance(label, str) and label:
        return label
    if not isinstance(config, dict):
        return "unknown configuration"
    from ..config import LoaderConfig

    try:
        return LoaderConfig.from_dict(config).label()
    except (TypeError, ValueError):
        return " ".join(f"{k}={v}" for k, v in config.items() if v is not None)


def ok_results(r: Record) -> list[BenchResult]:
    """Bench results that measured a rate (no error)."""
    return [res for res in results_of(r) if res.measured]


def result_for_config(r: Record, config: Any) -> BenchResult | None:
    """The bench result measured with exactly this config, if any."""
    if not isinstance(config, dict):
        return None
    for res in ok_results(r):
        if same_config(res.config, config):
            return res
    return None


def same_config(a: Any, b: Any) -> bool:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    keys = set(a) | set(b)
    return all(a.get(k) == b.get(k) for k in keys)


def steady_config(config: Any) -> dict[str, Any]:
    """The knobs that set the steady-state rate: ``persistent_workers`` only changes epoch
    boundaries (the epoch-boundary step adds it to a pick the race ran without it)."""
    return {k: v for k, v in (config or {}).items() if k != "persistent_workers"}


def workers_of(config: Any) -> int:
    value = config.get("num_workers") if isinstance(config, dict) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def batch_size_of(config: Any) -> int | None:
    """The config's batch size; None where the loader batches itself (its ``batch_size`` is no
    setting of it: the batches' size is read from what was measured)."""
    if isinstance(config, dict) and config.get("batches_itself"):
        return None
    value = config.get("batch_size") if isinstance(config, dict) else None
    return (
        int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
    )


def prefetch_of(config: Any) -> int:
    value = config.get("prefetch_factor") if isinstance(config, dict) else None
    # DataLoader's default prefetch_factor with workers is 2.
    return int(value) if isinstance(value, int) and value > 0 else 2


def single_process_result(r: Record, batch_size: int | None = None) -> BenchResult | None:
    """The num_workers=0 result, preferring the given batch size."""
    zero = [res for res in ok_results(r) if workers_of(res.config) == 0]
    for res in zero:
        if batch_size is None or batch_size_of(res.config) == batch_size:
            return res
    return zero[0] if zero else None

"""How the reports print numbers: one function per kind of quantity.

Every number in report.md / report.html goes through one of these, so the
report tests can check that each printed number is a record value (or a value
derived from the record) under exactly these rules.
"""

from __future__ import annotations

import math
from typing import Any

DASH = "—"
KIB = 1024
# Percentages that would round to 0.0% print as "below 0.1%" (a formatting bound, not a
# measurement).
SMALL_PERCENT = 0.1


def _scaled(value: float) -> str:
    """Three significant figures for everyday magnitudes, thousands separated."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1 or magnitude == 0:
        return f"{value:.2f}"
    # Small values keep three significant digits (0.0123), capped at 6 decimals.
    decimals = min(6, 2 - int(math.floor(math.log10(magnitude))))
    return f"{value:.{decimals}f}"


def fmt_fixed(value: float | None, digits: int = 1) -> str:
    """Console tables: fixed decimals, thousands separated, an en dash where nothing was
    measured."""
    return "–" if value is None else f"{value:,.{digits}f}"


_ROLES = {"sweep-best": "fastest in the sweep", "tuner": "fastest in the tuner's scan"}


def fmt_role(role: str | None, *, picked: bool = False) -> str:
    """Why a config raced, in the race table, and which row is the verdict's (``picked``): the
    record's role names who put a config in the race (the sweep, the tuner's scan), never the
    winner, which the race decides after it (the verdict names the one config to use)."""
    text = _ROLES.get(role or "", role or "–")
    if not picked:
        return text
    if role == "baseline":
        return "baseline, kept"
    return "pick" if role in (None, "other", "tuner") else f"pick, {text}"


def fmt_rate_cell(value: float | None) -> str:
    """Console tables: a rate at three significant figures (as :func:`fmt_rate`), an en dash where
    nothing was measured."""
    return "–" if value is None else _scaled(value)


def fmt_rate(value: float | None) -> str:
    """samples/s or batches/s."""
    return DASH if value is None else _scaled(value)


def fmt_ms(value: float | None) -> str:
    return DASH if value is None else f"{_scaled(value)} ms"


def fmt_seconds(value: float | None) -> str:
    """Durations: ms below a second, seconds below a minute, then minutes, then hours."""
    if value is None:
        return DASH
    if 0 < abs(value) < 1:
        return fmt_ms(value * 1000.0)
    if abs(value) < 60:
        return f"{_scaled(value)} s"
    if abs(value) < 3600:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.2f} h"


def fmt_fraction(value: float | None) -> str:
    """A fraction (0.42) as a percentage (42.0%)."""
    return DASH if value is None else fmt_percent(value * 100.0)


def fmt_percent(value: float | None) -> str:
    """A value already in percent (CPU %, GPU utilisation, record "percent" keys)."""
    if value is None:
        return DASH
    if 0 < abs(value) < SMALL_PERCENT / 2:
        return f"below {SMALL_PERCENT}%"
    return f"{value:,.0f}%" if abs(value) >= 100 else f"{value:.1f}%"


def fmt_ratio(value: float | None) -> str:
    """Speed-ups and ratios: 2.31×, 14.2×, 160×."""
    if value is None:
        return DASH
    if abs(value) >= 100:
        return f"{value:,.0f}×"
    return f"{value:.1f}×" if abs(value) >= 10 else f"{value:.2f}×"


def fmt_bytes(value: float | None) -> str:
    """Binary units, one decimal: 1.5 GiB."""
    if value is None:
        return DASH
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < KIB:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= KIB
    return f"{size:.1f} TiB"


def fmt_mib(value: float | None) -> str:
    """Memory reported in MiB by the resource sampler."""
    return DASH if value is None else fmt_bytes(value * KIB * KIB)


def fmt_count(value: int | float | None) -> str:
    return DASH if value is None else f"{int(value):,}"


def fmt_quantity(value: float | None, unit: str) -> str:
    """By unit name: fraction, percent, ratio, count, ms, s, bytes, rate."""
    formatter = {
        "fraction": fmt_fraction,
        "percent": fmt_percent,
        "ratio": fmt_ratio,
        "count": fmt_count,
        "ms": fmt_ms,
        "s": fmt_seconds,
        "bytes": fmt_bytes,
        "rate": fmt_rate,
    }[unit]
    return formatter(value)


def fmt_value(value: Any) -> str:
    """Free-form values from the record (evidence, recommendation fields)."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return _scaled(value) if math.isfinite(value) else DASH
    if isinstance(value, dict):
        return "; ".join(f"{k}: {fmt_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value(v) for v in value)
    return " ".join(str(value).split())

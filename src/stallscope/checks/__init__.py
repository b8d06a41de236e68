"""``check``: worker-safety, memory and sample-health checks with stable finding codes (SPEC §4).

Probes (``pickling``, ``health``, ``rng``, ``memory``, ``threads``) measure in
real worker processes; rules (``rules.DEFAULT_RULES``, one pure function per
finding code) turn the measurements into :class:`Finding` objects.
"""

from __future__ import annotations

from .findings import CODES, ERROR, INFO, SEVERITIES, WARNING, Finding
from .result import CheckResult
from .rules import DEFAULT_RULES, analyse
from .runner import DEFAULT_BUDGET_S, DEFAULT_TIMEOUT_S, check

__all__ = [
    "CODES",
    "DEFAULT_BUDGET_S",
    "DEFAULT_RULES",
    "DEFAULT_TIMEOUT_S",
    "ERROR",
    "INFO",
    "SEVERITIES",
    "WARNING",
    "CheckResult",
    "Finding",
    "analyse",
    "check",
]

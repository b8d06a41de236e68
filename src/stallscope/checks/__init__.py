"""``check``: worker-safety, memory and sample-health checks with stable finding codes (SPEC §4).

``runner`` (``ss.check``) runs the probes within a time budget, then the rules. Probes measure in
real worker processes: ``pickling``, ``health`` (with ``health_worker``, ``sampling`` for which
indices, ``stacks`` for hung workers), ``rng``, ``memory`` (with ``memory_worker``), ``sharding``
and ``threads``. Rules (``rules.DEFAULT_RULES`` and ``memory_rules``, one pure function per finding
code) turn the measurements into :class:`Finding` objects (``findings``), gathered in ``result``.
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

"""``check``: worker-safety, memory and sample-health checks with stable finding codes (SPEC §4).

``runner`` (``ss.check``) runs the probes within a time budget, then the rules. Probes measure in
real worker processes: ``pickling``, ``health`` (with ``health_worker``, ``sampling`` for which
indices, ``stacks`` for hung workers), ``rng``, ``memory`` (with ``memory_worker``), ``sharding``
and ``threads``. Rules (``rules.DEFAULT_RULES`` and ``memory_rules``, one pure function per finding
code) turn the measurements into :class:`Finding` objects (``findings``), gathered in ``result``.

The names below load their module on first use (``stallscope.lazy``), so that
``stallscope check --help`` reads the finding codes without importing the probes (and torch).
"""

from __future__ import annotations

from typing import Any

from ..lazy import load

# public name -> module that defines it
_EXPORTS = {
    "CODES": "findings",
    "DEFAULT_BUDGET_S": "findings",
    "DEFAULT_RULES": "rules",
    "DEFAULT_TIMEOUT_S": "findings",
    "ERROR": "findings",
    "INFO": "findings",
    "SEVERITIES": "findings",
    "WARNING": "findings",
    "CheckResult": "result",
    "Finding": "findings",
    "analyse": "rules",
    "check": "runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    return load(__name__, _EXPORTS, name)


def __dir__() -> list[str]:
    return __all__

"""Findings: what ``check`` reports (SPEC §4). The codes are a stable contract."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UsageError

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)

# Stable finding codes, in the order the spec lists them.
CODES = (
    "unpicklable",
    "duplicate-rng",
    "memory-growth",
    "iterable-duplicates",
    "copy-on-write",
    "slow-samples",
    "hang",
    "getitem-error",
    "collate-error",
    "shm-too-small",
    "oversubscription",
)

# The check's defaults, beside its codes so that ``stallscope check --help`` and ``doctor --help``
# state them without importing the probes: a sample that takes longer than the timeout is a
# ``hang``, and the probes share the budget (NOTE [check coverage] in runner.py).
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BUDGET_S = 60.0


@dataclass
class Finding:
    """One problem, with the numbers that prove it and what to change."""

    code: str
    severity: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown finding code {self.code!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(
            code=data["code"],
            severity=data["severity"],
            message=data["message"],
            evidence=dict(data.get("evidence") or {}),
            fix=data.get("fix", ""),
        )


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; spec order within a severity."""
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), CODES.index(f.code)))


# which probes each finding code needs
PROBES_FOR = {
    "unpicklable": {"pickling"},
    "duplicate-rng": {"rng"},
    "memory-growth": {"memory"},
    "iterable-duplicates": {"sharding"},
    "copy-on-write": {"memory"},
    "slow-samples": {"health"},
    "hang": {"health"},
    "getitem-error": {"health"},
    "collate-error": {"health"},
    "shm-too-small": {"health"},
    "oversubscription": {"health", "memory"},
}


def codes_of_probe(probe: str) -> list[str]:
    """The finding codes that rely on ``probe`` (what a skipped probe leaves unchecked)."""
    if probe == "shm":
        return ["shm-too-small"]
    if probe == "threads":
        return ["oversubscription"]
    return [code for code, needs in PROBES_FOR.items() if probe in needs]


def select_codes(only: Iterable[str] | None, skip: Iterable[str] | None) -> list[str]:
    chosen = list(CODES) if not only else list(dict.fromkeys(only))
    unknown = sorted({*chosen, *(skip or ())} - set(CODES))
    if unknown:
        raise UsageError(f"unknown check code {unknown[0]!r}; choose from {', '.join(CODES)}.")
    skipped = set(skip or ())
    return [c for c in chosen if c not in skipped]

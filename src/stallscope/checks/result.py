"""What ``check`` returns: findings (errors first), what was covered, the raw measurements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .findings import ERROR, Finding


@dataclass
class CheckResult:
    """What ``check`` found: findings (errors first), what was covered, the raw measurements."""

    target: str
    findings: list[Finding] = field(default_factory=list)
    coverage: dict[str, Any] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0

    def by_code(self, code: str) -> list[Finding]:
        return [f for f in self.findings if f.code == code]

    def to_dict(self) -> dict[str, Any]:
        """The record sections of ``check`` (SPEC §5): findings, coverage, and the measurements."""
        return {
            "findings": [f.to_dict() for f in self.findings],
            "coverage": self.coverage,
            "check_probes": self.probes,
        }

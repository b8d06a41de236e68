"""stallscope: find out why your accelerator waits for data, prove it, and fix it.

``import stallscope as ss`` gives the library surface; heavy modules load on
first use so ``stallscope --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

from .lazy import load

# The one place the version is written: pyproject.toml reads it from here at build time
# ([tool.setuptools.dynamic]), and every record and report prints it (tool_version).
__version__ = "0.4.0"

# public name -> module that defines it
_EXPORTS = {
    "LoaderConfig": "config",
    "load_target": "target",
    "Pipeline": "target",
    "bench": "throughput.sweep",
    "tune": "api",
    "make_loader": "tuning.autoconfig",
    "seed_worker": "pipeline.seeding",
    "chain_worker_init": "pipeline.seeding",
    "threaded_dataset": "pipeline.threaded",
    "check": "checks",
    "stages": "breakdown.probe",
    "stage": "breakdown.recorder",
    "watch": "api",
    "stall_summary": "render.console_profile",
    "RunRecord": "record",
    "UsageError": "errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    return load(__name__, _EXPORTS, name)


def __dir__() -> list[str]:
    return __all__

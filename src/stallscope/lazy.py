"""Package names that load their module on first use (PEP 562 ``__getattr__``).

``stallscope`` and ``stallscope.checks`` name their public objects in a table instead of importing
them, so that ``import stallscope`` and ``stallscope check --help`` do not import torch.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import import_module
from typing import Any


def load(package: str, exports: Mapping[str, str], name: str) -> Any:
    """``package.name`` from the submodule ``exports`` names for it, kept on the package so the
    next lookup does not come here; an unknown name is the usual ``AttributeError``."""
    module = exports.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", package), name)
    setattr(sys.modules[package], name, value)
    return value

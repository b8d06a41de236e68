"""What a dataset is, found by looking at it without running a loader.

Kept apart from the tuner and autoconfig, which both need it: the tuner must not import autoconfig
(autoconfig calls the tuner).
"""

from __future__ import annotations

import inspect
from typing import Any


def shards_by_worker(dataset: Any) -> bool:
    """Whether an IterableDataset's ``__iter__`` consults ``get_worker_info()`` (so workers split
    the stream)."""
    try:
        source = inspect.getsource(type(dataset).__iter__)
    except (OSError, TypeError):
        return False
    return "get_worker_info" in source

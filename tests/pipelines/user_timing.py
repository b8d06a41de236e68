"""An independent timing of the real-shape loaders: the user's own loader, timed the plain way.

Used by the fidelity test and ``benchmarks/fidelity_agreement.py`` to check that ``bench`` at
``num_workers=0`` reports what the user's loader really delivers.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import real_translation


def samples_in(module: ModuleType, batch: Any) -> int:
    """What the user's own code counts as samples in one of their batches."""
    if module is real_translation:
        return int(batch["nsentences"])
    return int(batch[0].shape[0])


def independent_rate(module: ModuleType, window_s: float) -> float:
    """Samples/s of ``module.make_loader(num_workers=0)`` over ``window_s`` after two
    warm-up batches."""
    loader = module.make_loader(num_workers=0)
    seen = 0
    started = None
    while True:
        for batch in loader:
            if started is None:
                seen += 1
                if seen >= 2:  # lazy opens and first allocations stay out of the window
                    started, seen = time.perf_counter(), 0
                continue
            seen += samples_in(module, batch)
            elapsed = time.perf_counter() - started
            if elapsed >= window_s:
                return seen / elapsed

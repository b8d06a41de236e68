"""Pickling as a DataLoader does for a spawn/forkserver worker, without its side effects: array
payloads replaced by stand-ins, the bytes counted (see ``pickling.py``'s module docstring and its
NOTE [probes on real objects]).
"""

from __future__ import annotations

import contextlib
import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any


class _ArrayStandIn:
    """What a tensor or array becomes in the probe's pickle (its bytes never matter here)."""

    def __init__(self, description: str) -> None:
        self.description = description

    def __reduce__(self) -> tuple[Any, ...]:
        return (_ArrayStandIn, (self.description,))


class _CountingSink:
    """A write-only file that counts bytes (optionally forwarding them to a real file)."""

    def __init__(self, target: Any = None) -> None:
        self.bytes = 0
        self.target = target

    def write(self, data: bytes) -> int:
        self.bytes += len(data)
        if self.target is not None:
            self.target.write(data)
        return len(data)


class _SpawningPopenStandIn:
    """Makes objects that only pickle "while spawning" (multiprocessing locks, queues) pickle.

    A DataLoader under spawn pickles its arguments inside ``Process.start()``,
    where multiprocessing marks the pickle as part of spawning a child; outside
    that, ``multiprocessing.Lock`` refuses to pickle. We reproduce the mark so the
    probe does not report what the real spawn path accepts.
    """

    def __init__(self) -> None:
        self.duplicated_fds = 0

    def duplicate_for_child(self, fd: int) -> int:
        self.duplicated_fds += 1
        return fd

    def DupFd(self, fd: int) -> int:  # noqa: N802 - multiprocessing's name
        return fd


class _ProbePickler(ForkingPickler):
    def __init__(self, file: Any) -> None:
        super().__init__(file, pickle.DEFAULT_PROTOCOL)
        self.array_bytes = 0

    def reducer_override(self, obj: Any) -> Any:
        described = _describe_array(obj)
        if described is None:
            return NotImplemented
        text, size = described
        self.array_bytes += size
        return (_ArrayStandIn, (text,))


def _describe_array(obj: Any) -> tuple[str, int] | None:
    """``(description, payload bytes)`` for a tensor, storage or ndarray; None otherwise."""
    module = type(obj).__module__ or ""
    if not (module.startswith("torch") or module.startswith("numpy")):
        return None
    import numpy as np
    import torch

    if isinstance(obj, torch.Tensor):
        return f"Tensor{list(obj.shape)}", obj.element_size() * obj.nelement()
    if isinstance(obj, (torch.UntypedStorage, torch.TypedStorage)):
        return "Storage", int(obj.nbytes())
    if isinstance(obj, np.ndarray) and obj.dtype != object:
        return f"ndarray{list(obj.shape)}", int(obj.nbytes)
    return None


@contextlib.contextmanager
def _as_if_spawning() -> Any:
    from multiprocessing import context

    stand_in = _SpawningPopenStandIn()
    previous = context.get_spawning_popen()
    # Pickling code only asks the spawning Popen for duplicate_for_child(); typeshed names the
    # concrete Popen classes, so the duck-typed stand-in needs the ignore.
    context.set_spawning_popen(stand_in)  # type: ignore[arg-type]
    try:
        yield stand_in
    finally:
        context.set_spawning_popen(previous)


def try_pickle(obj: Any, file: Any = None) -> tuple[BaseException | None, int, int, int]:
    """Pickle ``obj`` as the spawn path would: (error or None, bytes, array bytes, fds
    duplicated)."""
    sink = _CountingSink(file)
    pickler = _ProbePickler(sink)
    with _as_if_spawning() as spawning:
        try:
            pickler.dump(obj)
        except RecursionError as exc:
            return exc, sink.bytes, pickler.array_bytes, spawning.duplicated_fds
        except (
            Exception
        ) as exc:  # pickling raises anything: TypeError, PicklingError, AttributeError...
            return exc, sink.bytes, pickler.array_bytes, spawning.duplicated_fds
    return None, sink.bytes, pickler.array_bytes, spawning.duplicated_fds


def pickle_real(obj: Any, file: Any) -> BaseException | None:
    """Pickle ``obj`` with its real payloads, arrays by value, as a spawned worker would receive
    it (NOTE [probes on real objects]); the error, or None."""
    with _as_if_spawning():
        try:
            pickle.Pickler(file, pickle.DEFAULT_PROTOCOL).dump(obj)
        except RecursionError as exc:
            return exc
        except Exception as exc:  # pickling raises anything
            return exc
    return None

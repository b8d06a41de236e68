"""Probe: do DataLoader workers draw the same random numbers?

DataLoader seeds Python's ``random``, NumPy's legacy global RNG and torch's
global generator differently in each worker (torch 1.9+), but a random
generator the dataset created itself (``self.rng = np.random.default_rng()`` in
``__init__``, a ``random.Random``, a ``torch.Generator``, a module-level
Generator) is copied into every worker with the same state: under fork by the
fork itself, under spawn by the pickle. Every worker then produces the same
"random" augmentation, and with non-persistent workers the same again every
epoch.

The probe runs real DataLoader workers that each fetch the same indices (one of
them several times, which tells a random pipeline from a deterministic one),
and hashes what they return together with the state of the global RNGs and of
every RNG the dataset holds as an attribute. It does so for two epochs. The
comparison of those hashes is analysis (``rules.detect_duplicate_rng``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..pipeline.seeding import MAX_DEPTH, ChainedWorkerInit
from ..runtime.processes import stop_workers
from .util import describe_worker_exception

# As deep as ss.seed_worker looks, so the generators it names are those seed_worker reseeds.
_SCAN_DEPTH = MAX_DEPTH
_SCAN_OBJECTS = 5000
_CONTAINER_ITEMS = 50


# -- hashing samples and RNG states --------------------------------------------------------


def _feed(h: Any, obj: Any, depth: int = 0) -> None:
    import numpy as np
    import torch

    if depth > 8:
        h.update(b"<deep>")
        return
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{tuple(t.shape)}{t.dtype}".encode())
        try:
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        except (RuntimeError, TypeError):
            h.update(repr(t.tolist()).encode())
        return
    if isinstance(obj, np.ndarray):
        h.update(f"A{obj.shape}{obj.dtype}".encode())
        h.update(obj.tobytes() if obj.dtype != object else repr(obj.tolist()).encode())
        return
    if isinstance(obj, Mapping):  # dict, BatchEncoding, UserDict, TensorDict
        # keys(), not iteration: a TensorDict iterates over its batch dimension
        for key in sorted(obj.keys(), key=repr):
            h.update(repr(key).encode())
            _feed(h, obj[key], depth + 1)
        return
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            h.update(f.name.encode())
            _feed(h, getattr(obj, f.name, None), depth + 1)
        return
    if isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}".encode())
        for item in obj:
            _feed(h, item, depth + 1)
        return
    if isinstance(obj, (bytes, bytearray)):
        h.update(bytes(obj))
        return
    if isinstance(obj, (str, int, float, complex, bool)) or obj is None:
        h.update(repr(obj).encode())
        return
    tobytes = getattr(obj, "tobytes", None)  # PIL images and similar
    if callable(tobytes):
        try:
            h.update(
                repr(
                    (type(obj).__name__, getattr(obj, "size", None), getattr(obj, "mode", None))
                ).encode()
            )
            h.update(tobytes())
            return
        except Exception:
            pass
    try:
        import pickle

        h.update(pickle.dumps(obj))
    except Exception:
        h.update(repr(obj).encode())


def sample_digest(obj: Any) -> str:
    """A short hash of a sample's content (tensors, arrays, images, nested containers)."""
    h = hashlib.blake2b(digest_size=8)
    _feed(h, obj)
    return h.hexdigest()


def rng_kind(obj: Any) -> str | None:
    """The RNG type name when ``obj`` is a private random generator, else None."""
    import numpy as np
    import torch

    if isinstance(obj, random.SystemRandom):
        return None  # draws from the OS, never duplicated
    if isinstance(obj, random.Random):
        return None if obj is getattr(random, "_inst", None) else "random.Random"
    if isinstance(obj, np.random.Generator):
        return "numpy.random.Generator"
    if isinstance(obj, np.random.RandomState):
        return None if obj is np.random.mtrand._rand else "numpy.random.RandomState"
    if isinstance(obj, torch.Generator):
        return None if obj is torch.default_generator else "torch.Generator"
    return None


def rng_fingerprint(obj: Any) -> str | None:
    """A short hash of a generator's state: equal hashes mean equal future draws."""
    import numpy as np
    import torch

    h = hashlib.blake2b(digest_size=8)
    if isinstance(obj, random.Random):
        h.update(repr(obj.getstate()).encode())
    elif isinstance(obj, np.random.Generator):
        h.update(repr(obj.bit_generator.state).encode())
    elif isinstance(obj, np.random.RandomState):
        _feed(h, obj.get_state(legacy=False))
    elif isinstance(obj, torch.Generator):
        h.update(obj.get_state().numpy().tobytes())
    else:
        return None
    return h.hexdigest()


def global_fingerprints() -> dict[str, str]:
    """State hashes of the global RNGs DataLoader seeds per worker."""
    import numpy as np
    import torch

    out = {"random": hashlib.blake2b(repr(random.getstate()).encode(), digest_size=8).hexdigest()}
    h = hashlib.blake2b(digest_size=8)
    _feed(h, np.random.get_state(legacy=False))
    out["numpy"] = h.hexdigest()
    out["torch"] = hashlib.blake2b(
        torch.get_rng_state().numpy().tobytes(), digest_size=8
    ).hexdigest()
    return out


# -- finding RNGs held by the dataset -------------------------------------------------------


@dataclass
class RngAttribute:
    path: str  # "dataset.transform.rng"
    steps: list[tuple[str, Any]]  # how to reach it from the dataset: ("attr", name) / ("item", key)
    type: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "type": self.type}


def _attribute_items(obj: Any) -> list[tuple[tuple[str, Any], str, Any]]:
    import types

    if isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
        return []
    if isinstance(obj, dict):
        return [(("item", k), f"[{k!r}]", v) for k, v in list(obj.items())[:_CONTAINER_ITEMS]]
    if isinstance(obj, (list, tuple)):
        return [(("item", i), f"[{i}]", v) for i, v in enumerate(list(obj[:_CONTAINER_ITEMS]))]
    attrs: dict[str, Any] = {}
    try:
        attrs.update(vars(obj))
    except TypeError:
        pass
    for name in getattr(type(obj), "__slots__", ()) or ():
        if isinstance(name, str) and hasattr(obj, name):
            attrs[name] = getattr(obj, name)
    return [(("attr", k), f".{k}", v) for k, v in attrs.items()]


def find_rng_attributes(dataset: Any, root: str = "dataset") -> list[RngAttribute]:
    """Random generators the dataset holds (breadth first, a few levels deep)."""
    found: list[RngAttribute] = []
    seen = {id(dataset)}
    queue: list[tuple[Any, str, list[tuple[str, Any]], int]] = [(dataset, root, [], 0)]
    visited = 0
    while queue and visited < _SCAN_OBJECTS:
        obj, path, steps, depth = queue.pop(0)
        visited += 1
        for step, label, child in _attribute_items(obj):
            if (
                id(child) in seen
                or isinstance(child, (str, bytes, int, float, bool))
                or child is None
            ):
                continue
            seen.add(id(child))
            kind = rng_kind(child)
            if kind is not None:
                found.append(RngAttribute(path + label, steps + [step], kind))
            elif depth + 1 < _SCAN_DEPTH:
                queue.append((child, path + label, steps + [step], depth + 1))
    return found


def resolve(obj: Any, steps: list[tuple[str, Any]]) -> Any:
    for kind, key in steps:
        try:
            obj = getattr(obj, key) if kind == "attr" else obj[key]
        except Exception:
            return None
    return obj


# -- the probe, in the workers ------------------------------------------------------------------


class RngProbeCollate:
    """Collate for the probe: runs in the worker, returns hashes instead of a batch."""

    def __init__(self, attributes: list[tuple[str, list[tuple[str, Any]]]]) -> None:
        self.attributes = attributes

    def __call__(self, items: list[Any]) -> dict[str, Any]:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        dataset = info.dataset if info is not None else None
        return {
            "worker": info.id if info is not None else -1,
            "pid": os.getpid(),
            # a dataset's own __getitems__ may hand over the batch itself (a TensorDict): one
            # digest of it then, as of a batch the loader made
            "digests": (
                [sample_digest(item) for item in items]
                if isinstance(items, list)
                else [sample_digest(items)]
            ),
            "globals": global_fingerprints(),
            "attributes": {
                path: rng_fingerprint(resolve(dataset, steps)) for path, steps in self.attributes
            },
        }


@dataclass(frozen=True)
class _RunSettings:
    """What every run of the probe's workers shares; only the ``worker_init_fn`` differs."""

    pipeline: Any
    indices: list[int]  # every worker fetches all of them
    workers: int
    start_method: str
    attributes: list[RngAttribute]
    timeout: float
    deadline: float
    seed: int
    epochs: int = 2


def _run_workers(settings: _RunSettings, worker_init_fn: Any) -> list[list[dict[str, Any]]]:
    """Per epoch, one hash report per worker (sorted by worker id); fewer epochs past
    ``deadline``."""
    import torch
    from torch.utils.data import DataLoader

    pipeline, indices, workers = settings.pipeline, settings.indices, settings.workers
    collate = RngProbeCollate([(a.path, a.steps) for a in settings.attributes])
    generator = torch.Generator().manual_seed(settings.seed)
    runs: list[list[dict[str, Any]]] = []
    for _ in range(settings.epochs):
        left = settings.deadline - time.monotonic()
        if runs and left < 1.0:
            break
        common: dict[str, Any] = {
            "num_workers": workers,
            "collate_fn": collate,
            "worker_init_fn": worker_init_fn,
            "multiprocessing_context": settings.start_method,
            "timeout": max(1.0, min(settings.timeout, left)),  # every wait on a worker is bounded
            "generator": generator,
        }
        if pipeline.is_iterable:
            loader = DataLoader(pipeline.dataset, batch_size=len(indices), **common)
        else:
            loader = DataLoader(
                pipeline.dataset, batch_sampler=[list(indices) for _ in range(workers)], **common
            )
        by_worker: dict[int, dict[str, Any]] = {}
        iterator = iter(loader)
        failure: BaseException | None = None
        try:
            for report in iterator:
                by_worker.setdefault(report["worker"], report)
                if pipeline.is_iterable and len(by_worker) >= workers:
                    break
        except BaseException as exc:
            failure = exc
            raise
        finally:
            stop_workers(iterator, failure)  # NOTE [worker death] in runtime/processes.py
        runs.append([by_worker[k] for k in sorted(by_worker)])
    return runs


def load_seed_worker() -> Any:
    """``stallscope.pipeline.seeding.seed_worker`` if it is available (imported lazily)."""
    try:
        from ..pipeline.seeding import seed_worker
    except ImportError:
        return None
    return seed_worker


def probe_rng(
    pipeline: Any,
    *,
    indices: list[int],
    repeats: int,
    workers: int,
    start_method: str,
    timeout: float,
    deadline: float,
    seed: int = 0,
    try_seed_worker: bool = True,
) -> dict[str, Any]:
    """Run the probe; ``indices[0]`` is fetched ``repeats`` times first in every worker."""
    started = time.perf_counter()
    attributes = find_rng_attributes(pipeline.dataset)
    fetch = [indices[0]] * repeats + list(indices[1:])
    record: dict[str, Any] = {
        "kind": "iterable" if pipeline.is_iterable else "map",
        "indices": fetch,
        "repeats": repeats,
        "workers": workers,
        "start_method": start_method,
        "attributes": [
            {
                **a.to_dict(),
                "parent_fingerprint": rng_fingerprint(resolve(pipeline.dataset, a.steps)),
            }
            for a in attributes
        ],
        "epochs": [],
        "with_seed_worker": None,
        "seed_worker_available": None,
        "error": None,
    }
    settings = _RunSettings(
        pipeline, fetch, workers, start_method, attributes, timeout, deadline, seed
    )
    try:
        record["epochs"] = _run_workers(settings, pipeline.worker_init_fn)
    except Exception as exc:  # the user's dataset failed in a worker: record, do not crash check
        record["error"] = describe_worker_exception(exc)
        record["seconds"] = round(time.perf_counter() - started, 3)
        return record
    if try_seed_worker and duplicated_streams(record)["any"] and time.monotonic() < deadline - 1.0:
        seed_worker = load_seed_worker()
        record["seed_worker_available"] = seed_worker is not None
        if seed_worker is not None:
            try:
                record["with_seed_worker"] = _run_workers(
                    settings, ChainedWorkerInit(pipeline.worker_init_fn, seed_worker)
                )
            except Exception as exc:
                record["with_seed_worker_error"] = describe_worker_exception(exc)
    record["seconds"] = round(time.perf_counter() - started, 3)
    return record


# -- comparing the hashes (pure; shared by the probe and the rule) ------------------------------


def _all_equal(values: list[Any]) -> bool:
    return len(values) >= 2 and all(v == values[0] for v in values[1:])


def duplicated_streams(record: dict[str, Any], epochs_key: str = "epochs") -> dict[str, Any]:
    """What the hashes of one probe run say.

    ``random``: the pipeline is random (one index fetched repeatedly in a worker
    gave different samples); None when it cannot be told (iterable datasets).
    ``across_workers`` / ``across_epochs``: a random pipeline produced the same
    samples in different workers / in the same worker in two epochs.
    ``attributes``: RNG attributes whose state advanced in the workers yet is
    identical across workers (or epochs). ``globals``: global RNGs identical
    across workers.
    """
    epochs = record.get(epochs_key) or []
    out: dict[str, Any] = {
        "random": None,
        "across_workers": False,
        "across_epochs": False,
        "attributes": [],
        "globals": [],
        "any": False,
    }
    if not epochs or not epochs[0]:
        return out
    first = epochs[0]
    repeats = int(record.get("repeats") or 1)
    if record.get("kind") == "map" and repeats >= 2:
        out["random"] = any(len(set(w["digests"][:repeats])) > 1 for w in first)
    sequences = [tuple(w["digests"]) for w in first]
    if out["random"] and len(first) >= 2:
        out["across_workers"] = _all_equal(sequences)
    if out["random"] and len(epochs) >= 2:
        later = {w["worker"]: tuple(w["digests"]) for w in epochs[1]}
        pairs = [(tuple(w["digests"]), later.get(w["worker"])) for w in first]
        out["across_epochs"] = bool(pairs) and all(a == b for a, b in pairs)
    parents = {a["path"]: a.get("parent_fingerprint") for a in record.get("attributes") or []}
    for path, parent in parents.items():
        states = [w["attributes"].get(path) for w in first]
        advanced = any(s is not None and s != parent for s in states)
        if not advanced:
            continue  # never drawn from while fetching: harmless
        same_workers = len(first) >= 2 and _all_equal(states)
        same_epochs = False
        if len(epochs) >= 2:
            later = {w["worker"]: w["attributes"].get(path) for w in epochs[1]}
            same_epochs = all(later.get(w["worker"]) == w["attributes"].get(path) for w in first)
        if same_workers or same_epochs:
            out["attributes"].append(
                {"path": path, "across_workers": same_workers, "across_epochs": same_epochs}
            )
    if len(first) >= 2:
        out["globals"] = [
            name
            for name in ("random", "numpy", "torch")
            if _all_equal([w["globals"][name] for w in first])
        ]
    out["any"] = bool(out["across_workers"] or out["across_epochs"] or out["attributes"])
    return out

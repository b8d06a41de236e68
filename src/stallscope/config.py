"""``LoaderConfig``: the DataLoader knobs stallscope measures, tunes and emits."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

# DataLoader arguments a LoaderConfig sets besides the batch size: what the tuner turns.
LOADER_KNOBS = (
    "num_workers",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory",
    "in_order",
    "multiprocessing_context",
)


@dataclass(frozen=True)
class LoaderConfig:
    """One DataLoader configuration.

    ``batched_fetch`` asks for the whole batch of indices in one call
    (``dataset.__getitems__`` when the dataset has it, or a batch sampler),
    which removes per-item overhead for in-memory data. ``torch_threads`` is
    the main process's intra-op thread count (``torch.set_num_threads``);
    None leaves it alone. ``worker_threads`` (K > 0) has each worker — or the
    main process at ``num_workers=0`` — fetch a batch's items with a K-thread
    pool (:func:`stallscope.threaded_dataset`), which overlaps the waits of a
    latency-bound source at a fraction of the memory of more processes; 0 is off.
    """

    num_workers: int = 0
    batch_size: int = 1
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    pin_memory: bool = False
    in_order: bool = True
    multiprocessing_context: str | None = None
    batched_fetch: bool = False
    torch_threads: int | None = None
    worker_threads: int = 0
    # Knobs of other loader kinds (NOTE [loader kinds] in pipeline/kinds.py): None leaves the
    # loader's own.
    worker_method: str | None = None  # torchdata.nodes ParallelMapper: "thread" or "process"
    snapshot_every_n_steps: int | None = None  # torchdata's StatefulDataLoader
    # The loader builds its batches itself (``batch_size=None`` over a dataset that yields batches,
    # a wrapper or iterable that is not a DataLoader): ``batch_size`` is then no setting of it, and
    # no label shows one (the batches' own size is read from what was measured).
    batches_itself: bool = False
    # The knobs a label shows when it is not told (``label(knobs=None)``): a factory's configs
    # show only the knobs its parameters take, never a DataLoader default its call did not pass.
    # How a config is shown, not a setting: not compared, not saved.
    label_knobs: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ValueError("num_workers must be >= 0")
        if self.worker_threads < 0:
            raise ValueError("worker_threads must be >= 0")
        if self.worker_threads and self.batched_fetch:
            # Two ways to fetch a batch: one vectorised call, or its items concurrently.
            raise ValueError("worker_threads and batched_fetch are alternatives; set one of them")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.num_workers == 0:
            # Torch rejects these without workers; normalise so equal configs compare equal.
            object.__setattr__(self, "prefetch_factor", None)
            object.__setattr__(self, "persistent_workers", False)
            object.__setattr__(self, "multiprocessing_context", None)
            object.__setattr__(self, "in_order", True)
        elif self.prefetch_factor is None:
            object.__setattr__(self, "prefetch_factor", 2)

    # -- conversions -------------------------------------------------------
    def to_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.utils.data.DataLoader``.

        ``batched_fetch``, ``torch_threads`` and ``worker_threads`` are not
        DataLoader arguments; :func:`stallscope.make_loader` applies them.
        """
        kwargs: dict[str, Any] = {
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
        }
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor
            kwargs["persistent_workers"] = self.persistent_workers
            if self.multiprocessing_context:
                kwargs["multiprocessing_context"] = self.multiprocessing_context
            if not self.in_order and loader_supports("in_order"):
                kwargs["in_order"] = False
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["label_knobs"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoaderConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown LoaderConfig keys: {', '.join(unknown)}")
        return cls(**data)

    def to_yaml(self) -> str:
        return str(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def from_yaml(cls, text: str) -> LoaderConfig:
        data = yaml.safe_load(text) or {}
        if isinstance(data, dict) and "config" in data and isinstance(data["config"], dict):
            data = data["config"]
        if not isinstance(data, dict):
            raise ValueError("a LoaderConfig YAML must be a mapping")
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> LoaderConfig:
        return cls.from_yaml(Path(path).read_text())

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_yaml())

    def replace(self, **changes: Any) -> LoaderConfig:
        return replace(self, **changes)

    def label(self, knobs: Collection[str] | None = None) -> str:
        """A short human label, e.g. ``w=4 bs=32 pf=2`` or ``w=2 threads×16 bs=32 pf=2``.

        Worker threads read ``threads×K`` (K fetch threads per worker), the
        main process's intra-op threads ``torch_threads=N``: two different knobs.
        ``knobs``: only the fields a loader kind really has (NOTE [loader kinds]), so a
        factory that takes only ``threads=`` reads ``threads×4``, never a made-up
        ``w=0 bs=1``; "as built" when it has none.
        """
        if knobs is None:
            knobs = self.label_knobs
        shown = set(knobs) if knobs is not None else {f.name for f in fields(self)}
        workers = self.num_workers if "num_workers" in shown else None
        parts = [f"w={workers}"] if workers is not None else []
        if self.worker_threads and "worker_threads" in shown:
            parts.append(f"threads×{self.worker_threads}")
        if "batch_size" in shown and not self.batches_itself:
            parts.append(f"bs={self.batch_size}")
        if workers != 0:
            if "prefetch_factor" in shown and self.prefetch_factor is not None:
                parts.append(f"pf={self.prefetch_factor}")
            if self.persistent_workers and "persistent_workers" in shown:
                parts.append("persistent")
            if not self.in_order and "in_order" in shown:
                parts.append("unordered")
            if self.multiprocessing_context and "multiprocessing_context" in shown:
                parts.append(self.multiprocessing_context)
        if self.pin_memory and "pin_memory" in shown:
            parts.append("pin")
        if self.batched_fetch and "batched_fetch" in shown:
            parts.append("batched")
        if self.torch_threads is not None and "torch_threads" in shown:
            parts.append(f"torch_threads={self.torch_threads}")
        if self.worker_method and workers != 0 and "worker_method" in shown:
            parts.append(
                f"{self.worker_method}es"
                if self.worker_method == "process"
                else f"{self.worker_method}s"
            )
        if self.snapshot_every_n_steps is not None and "snapshot_every_n_steps" in shown:
            parts.append(f"snapshot/{self.snapshot_every_n_steps}")
        return " ".join(parts) or "as built"


def loader_supports(argument: str) -> bool:
    """Whether this torch's DataLoader takes ``argument`` (``in_order`` came in 2.6)."""
    import inspect

    from torch.utils.data import DataLoader

    return argument in inspect.signature(DataLoader.__init__).parameters


def config_from_loader(loader: Any) -> LoaderConfig:
    """The user's baseline: the knobs of an existing DataLoader."""
    num_workers = int(getattr(loader, "num_workers", 0) or 0)
    ctx = getattr(loader, "multiprocessing_context", None)
    ctx_name = (
        ctx.get_start_method() if ctx is not None and hasattr(ctx, "get_start_method") else None
    )
    batch_size = getattr(loader, "batch_size", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    # batch_size=None and no batch sampler: each item the dataset yields is a batch already.
    batches_itself = batch_size is None and batch_sampler is None
    if batch_size is None:
        batch_size = getattr(batch_sampler, "batch_size", 1) or 1
    return LoaderConfig(
        batches_itself=batches_itself,
        num_workers=num_workers,
        batch_size=int(batch_size),
        prefetch_factor=getattr(loader, "prefetch_factor", None) if num_workers else None,
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        pin_memory=bool(getattr(loader, "pin_memory", False)),
        in_order=bool(getattr(loader, "in_order", True)),
        multiprocessing_context=ctx_name,
    )

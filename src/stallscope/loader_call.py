"""The user's loader call as plain data: what the record's ``loader`` section holds.

Probes fill it (:mod:`stallscope.pipeline.arguments` describes a live loader); the
snippet renderer (:mod:`stallscope.render.loader_code`) writes code from it. It lives
outside both so that renderers read it without importing a probe.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Argument:
    """One argument of the user's call: the Python source that reproduces it."""

    name: str
    source: str
    imports: list[str] = field(default_factory=list)
    placeholder: bool = False  # ``source`` is a marked ``<your ...>`` stand-in, not code
    positional: bool = False


@dataclass
class LoaderCall:
    """How the user built their loader (or would, for a Dataset target)."""

    callable: str = "DataLoader"
    imports: list[str] = field(default_factory=lambda: ["from torch.utils.data import DataLoader"])
    arguments: list[Argument] = field(default_factory=list)
    batching: str = (
        "batch_size"  # "batch_size" | "batch_sampler" (the user's batches decide their sizes)
    )
    batch_sizes: dict[str, float] | None = (
        None  # min, max, mean, batches: from the sampler's index lists
    )
    loader_class: str | None = None  # "module:Class" of a DataLoader subclass
    note: str | None = None
    # RNG objects the dataset holds (dataset.rng, ...): torch's per-worker seeding misses them.
    rng_attributes: list[str] = field(default_factory=list)
    knobs: dict[str, Any] | None = (
        None  # the user's LoaderConfig (what "changed" is measured against)
    )
    # Calling the TARGET factory again in the user's code: ``from train import make_loader`` and
    # ``make_loader()``; objects that cannot be imported are read from what it returns.
    origin: str | None = None
    origin_imports: list[str] = field(default_factory=list)
    # Calling ``origin`` gives the loader itself (a DataLoader, a subclass, a wrapper, a loader of
    # another kind), not its parts (a Dataset, a dict holding one): only then is keeping the
    # user's loader ``loader = make_loader()``.
    origin_is_loader: bool = False
    loader_path: str = (
        ""  # where the DataLoader sits in what the factory returns (".loader" in a wrapper)
    )
    factory_parameters: dict[str, str] = field(
        default_factory=dict
    )  # factory keyword -> LoaderConfig field
    # The knob keywords its constructor takes (None: all of DataLoader's).
    accepts: list[str] | None = None
    # Each argument's object as a path in what the factory returns ("" is that object itself).
    role_paths: dict[str, str] = field(default_factory=dict)

    def prefix_paths(self, prefix: str) -> None:
        """The loader sits at ``prefix`` in what the factory returns (a wrapper, a dict)."""
        self.role_paths = {role: prefix + path for role, path in self.role_paths.items()}

    def argument(self, name: str) -> Argument | None:
        return next((a for a in self.arguments if a.name == name), None)

    @property
    def origin_name(self) -> str:
        """The factory as the code names it (``make_loader``); "" where there is none."""
        return (self.origin or "").removesuffix("()")

    @property
    def own_factory(self) -> bool:
        """A factory of the user's that takes knobs and returns the DataLoader this call describes
        (NOTE [a DataLoader's factory] in render/loader_snippet.py): the advice calls it."""
        return bool(
            self.origin and self.origin_is_loader and self.factory_parameters and self.arguments
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoaderCall:
        args = [Argument(**a) for a in data.get("arguments", [])]
        known = {
            k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "arguments"
        }
        return cls(arguments=args, **known)

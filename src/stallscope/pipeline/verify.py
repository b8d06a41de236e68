"""Running the code stallscope is about to print (SPEC §8: printed code has been built and run).

NOTE [verified snippets]
A recommendation is written as code by the snippet renderer; before any
command shows it, :func:`run_snippet` executes that very text in this process
(with the target's folder importable, as the user would run it from there),
takes two batches from the ``loader`` it defines, compares their structure with
the user's own batches (types, keys and dtypes; shapes may differ with the batch
size) and checks that the knobs it sets took effect on a DataLoader. The result
goes into the record (``loader_code``); renderers print the code only where it ran,
else the change in words and why. Workers the snippet starts are shut down
here, and any process left over is reaped.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..config import LoaderConfig
from ..errors import describe_exception
from ..runtime.held_output import held_call


@dataclass
class SnippetRun:
    ok: bool
    reason: str | None = None
    structure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"verified": self.ok, "reason": self.reason, "structure": self.structure}


def skeleton(structure: str) -> str:
    """A structure description without sizes: ``Tensor[N,N] int64`` for ``Tensor[8,40] int64``."""
    return re.sub(r"\d+", "N", structure)


def run_snippet(
    code: str,
    *,
    reference: str | None,
    config: LoaderConfig | None = None,
    loader_path: str = "",
    timeout: float = 60.0,
    attributes: bool = False,
) -> SnippetRun:
    """Execute ``code``, take two batches from its ``loader``, compare with ``reference`` (a
    ``describe_structure`` of the user's batch) and check ``config``'s knobs on the DataLoader,
    which sits at ``loader_path`` inside ``loader`` when the code puts it back into the user's
    wrapper. ``attributes``: the code sets the knobs as attributes on an object already built, so
    the DataLoader must be seen to build its iterator with them."""
    from ..pipeline.structure import describe_structure
    from ..runtime.processes import no_orphans, stop_workers
    from .kinds import close_trial, terminate_pools

    namespace: dict[str, Any] = {"__name__": "__stallscope_snippet__"}
    loader = iterator = None
    try:
        with no_orphans(), held_call():  # NOTE [held output]
            try:
                exec(compile(code, "<stallscope snippet>", "exec"), namespace)  # noqa: S102 - our own printed code
                loader = namespace.get("loader")
                if loader is None:
                    return SnippetRun(False, "the code defines no `loader`")
                inner = eval(f"loader{loader_path}", namespace) if loader_path else loader  # noqa: S307 - our path
                wrong = _knobs_not_set(inner, config)
                if wrong:
                    return SnippetRun(False, f"the loader it builds does not take {wrong}")
                # Knobs set as attributes after building must be seen read (a constructor's
                # arguments are checked above, on the object it built).
                watch = _IteratorWatch.install(inner) if attributes and config else None
                try:
                    with _deadline(timeout):
                        iterator = iter(loader)
                        first = next(iterator)
                        next(iterator)
                finally:
                    if watch is not None:
                        watch.remove()
                unread = _workers_not_read(watch, config)
                if unread:
                    return SnippetRun(False, unread)
            except StopIteration:
                return SnippetRun(False, "the loader it builds yielded fewer than two batches")
            except _NoBatchInTime:
                return SnippetRun(
                    False, f"the loader it builds gave no two batches in {timeout:g} s"
                )
            except Exception as exc:
                return SnippetRun(False, f"running it raised {describe_exception(exc, 160)}")
            finally:
                if iterator is not None:
                    stop_workers(iterator)
                # What the snippet built, not the modules and functions it imported (a module's
                # own pool serves the trials still to come).
                built = [v for k, v in namespace.items() if k[:2] != "__" and not _imported(v)]
                terminate_pools(loader, iterator, *built)
                close_trial(loader, iterator)
                for value in list(namespace.values()):
                    if value is not loader:
                        with contextlib.suppress(Exception):
                            close_trial(value, None)
    except Exception as exc:  # shutting down failed: the code still ran
        return SnippetRun(False, f"shutting its workers down raised {describe_exception(exc, 160)}")
    structure = describe_structure(first)
    if reference is not None and skeleton(structure) != skeleton(reference):
        return SnippetRun(
            False, f"its batches look like {structure}, yours like {reference}", structure
        )
    return SnippetRun(True, None, structure)


class _NoBatchInTime(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`_NoBatchInTime` in this thread after ``seconds`` (a SIGALRM timer, so a wait
    inside the snippet's loader is interrupted whatever it waits on: a DataLoader built without
    ``timeout=`` whose forked workers hang, NOTE [fork after use], waited forever and hung
    ``doctor``). Outside the main thread, or where SIGALRM is someone else's, it does nothing."""
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
    )
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise _NoBatchInTime

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _imported(value: Any) -> bool:
    return inspect.ismodule(value) or inspect.isclass(value) or inspect.isroutine(value)


class _IteratorWatch:
    """Notes the ``num_workers`` a DataLoader reads each time it builds an iterator: set on the
    instance, it shadows DataLoader's ``_get_iterator``, which every ``__iter__`` (torch's,
    torchdata's, a subclass's calling ``super().__iter__()``) goes through."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.seen: list[int] = []
        self.original = loader._get_iterator

    def __call__(self) -> Any:
        self.seen.append(int(self.loader.num_workers))
        return self.original()

    @classmethod
    def install(cls, loader: Any) -> _IteratorWatch | None:
        from torch.utils.data import DataLoader

        if not isinstance(loader, DataLoader):
            return None
        watch = cls(loader)
        object.__setattr__(loader, "_get_iterator", watch)
        return watch

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            vars(self.loader).pop("_get_iterator", None)


def _workers_not_read(watch: _IteratorWatch | None, config: LoaderConfig | None) -> str | None:
    """Why the ``num_workers`` the code sets on a DataLoader is not what runs, or None where the
    loader built its iterator with that many workers: the object may hold the attribute and never
    read it (a subclass whose batches come from an engine of its own), and a change is printed only
    where it was seen to take effect (NOTE [verified snippets])."""
    if config is None or watch is None:
        return None
    wanted = config.num_workers
    if not watch.seen:
        return (
            f"its batches do not come from a DataLoader iterator, so the num_workers={wanted} it "
            "sets is not seen to be read"
        )
    if wanted not in watch.seen:
        built = watch.seen[0]
        return f"it sets num_workers={wanted}, but the DataLoader built its iterator with {built}"
    return None


def _knobs_not_set(loader: Any, config: LoaderConfig | None) -> str | None:
    """``num_workers=4`` when the DataLoader the code built has another value than ``config``
    asks."""
    from torch.utils.data import DataLoader

    if config is None or not isinstance(loader, DataLoader):
        return None
    wanted: dict[str, Any] = {"num_workers": config.num_workers}
    if config.num_workers:
        wanted["prefetch_factor"] = config.prefetch_factor
        wanted["persistent_workers"] = config.persistent_workers
    for name, value in wanted.items():
        if getattr(loader, name, value) != value:
            return f"{name}={value!r} (it has {getattr(loader, name)!r})"
    return None

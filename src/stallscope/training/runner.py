"""The ``profile`` probe: run the target's real training step on a real DataLoader and watch it.

The target (SPEC §2.1) returns a dict with ``dataset``, ``model`` and
``train_step``. ``train_step`` is called once per batch as

- ``train_step(model, batch)`` when it takes two required positional
  parameters (or one named ``model`` first), or
- ``train_step(batch)`` when it takes one (the model is then the step's own
  business, e.g. a closure).

Its return value is ignored. Each batch is moved to ``--device`` first
(tensors inside tuples, lists and dicts; ``non_blocking`` when pinned): that
copy is part of the step's compute, as in a real loop. The loop runs
``warmup + steps`` steps through :class:`stallscope.training.watch.Watch`; warm-up steps
and the first batch (start-up) are reported apart from the steady state.

Under ``torchrun`` every rank runs its own shard of the indices and
measures; the per-rank summaries are gathered on all ranks (gloo on CPU,
nccl on CUDA) and rank 0 reports them.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import Sampler

from ..config import LoaderConfig
from ..errors import PipelineError, UsageError, describe_exception
from ..pipeline.structure import to_device
from ..runtime.processes import shutdown_iterator
from ..target import Pipeline
from ..throughput.measure import warmup_batches_for
from . import DEFAULT_STEPS, MIN_WARMUP
from .replay import CACHED_BATCHES, replay_free_data
from .replay import MIN_STEPS as REPLAY_STEPS
from .watch import SyncSpec, Watch, resolve_sync


def default_warmup(config: LoaderConfig) -> int:
    """Warm-up steps: the prefetch buffer's fill plus one round per worker, at least
    :data:`MIN_WARMUP`.

    When the first batch arrives the workers have been filling the buffer
    (``num_workers × prefetch_factor`` batches) while the loop started:
    those batches come out without waiting, and one more round per worker
    passes before the wait reflects the steady rate. Counting them as steady
    steps would understate the stall. It is the throughput warm-up
    (:func:`stallscope.throughput.measure.warmup_batches_for`), for the
    same reason.
    """
    return max(MIN_WARMUP, warmup_batches_for(config))


# -- calling the user's train_step -------------------------------------------------------


def train_step_style(train_step: Callable[..., Any], has_model: bool) -> str:
    """``"model, batch"`` or ``"batch"``: how to call ``train_step``, by inspecting its
    signature."""
    try:
        params = list(inspect.signature(train_step).parameters.values())
    except (TypeError, ValueError):  # builtins, some C extensions
        return "model, batch" if has_model else "batch"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    var_positional = any(p.kind == p.VAR_POSITIONAL for p in params)
    if len(required) >= 3:
        names = ", ".join(p.name for p in required)
        raise UsageError(
            f"train_step takes {len(required)} required arguments ({names}); it must be "
            "train_step(model, batch) or train_step(batch)."
        )
    if len(required) == 2:
        return "model, batch"
    if len(required) == 1:
        if len(positional) >= 2 and positional[0].name == "model" and has_model:
            return "model, batch"
        return "batch"
    if var_positional or len(positional) >= 2:
        return "model, batch" if has_model else "batch"
    if len(positional) == 1:
        return "batch"
    raise UsageError(
        "train_step takes no positional argument; it must be train_step(model, batch) or "
        "train_step(batch)."
    )


def step_caller(train_step: Callable[..., Any], model: Any) -> tuple[Callable[[Any], Any], str]:
    """A one-argument function running one training step, and the call style for the record."""
    if not callable(train_step):
        raise UsageError(
            f"the target's train_step is a {type(train_step).__name__}, not a callable."
        )
    style = train_step_style(train_step, model is not None)
    if style == "model, batch":
        if model is None:
            raise UsageError("train_step takes (model, batch) but the target returned no 'model'.")
        return (lambda batch: train_step(model, batch)), "train_step(model, batch)"
    return train_step, "train_step(batch)"


def resolve_device(name: str | None) -> str:
    """``cpu`` or ``cuda[:N]``; default: cuda when available. Asking for CUDA without one is a usage
    error."""
    import torch

    if name is None or name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(
                f"--device {name} was asked for, but this process sees no CUDA device; use "
                "--device cpu."
            )
        return name
    raise UsageError(f"--device must be cpu or cuda, not {name!r}.")


def resolve_profile_sync(sync: bool | None, device: str) -> SyncSpec:
    """Synchronise at step boundaries on CUDA unless told not to (honest device timing); never on
    CPU."""
    if not device.startswith("cuda"):
        return None
    if sync is False:
        return None
    return "cuda"


def prepare_model(model: Any, device: str) -> Any:
    """Put an ``nn.Module`` on the device in training mode; anything else is passed as is."""
    try:
        import torch

        if isinstance(model, torch.nn.Module):
            model.to(device)
            model.train()
    except Exception as exc:
        raise PipelineError(
            f"moving the model to {device} raised {describe_exception(exc)}."
        ) from exc
    return model


# -- samplers ------------------------------------------------------------------------------


class RankShardSampler(Sampler[int]):
    """``total`` indices of this rank's shard (rank, rank + world, ...), cycling over the
    dataset."""

    def __init__(self, length: int, total: int, rank: int = 0, world_size: int = 1) -> None:
        if length <= 0:
            raise ValueError("length must be positive")
        self.length, self.total, self.rank, self.world_size = (
            length,
            total,
            rank,
            max(1, world_size),
        )

    def __iter__(self) -> Iterator[int]:
        for k in range(self.total):
            yield (self.rank + k * self.world_size) % self.length

    def __len__(self) -> int:
        return self.total


# -- the probe -----------------------------------------------------------------------------


def run_profile(
    pipeline: Pipeline,
    *,
    steps: int = DEFAULT_STEPS,
    warmup: int | None = None,
    config: LoaderConfig | None = None,
    device: str = "cpu",
    sync: SyncSpec = None,
    timeout: float = 60.0,
    sample_interval: float = 0.05,
    on_step: Callable[[int, int], None] | None = None,
    watch_options: dict[str, Any] | None = None,
    free_data: bool = True,
) -> dict[str, Any]:
    """Run ``warmup + steps`` real training steps and return the ``profile`` section.

    ``warmup=None``: :func:`default_warmup` of the loader config used.
    ``sync`` is passed to :class:`Watch` (``"cuda"`` or a callable; tests pass
    a fake device's synchronise). ``on_step(done, total)`` reports progress.
    ``free_data``: then replay the first batches through ``train_step`` with the
    loader shut down (``training/replay.py``): ``free_data_step_s``.
    """
    from ..pipeline.loaders import build_loader
    from ..runtime.distributed import rank_info
    from ..runtime.host import usable_cores

    if steps < 1:
        raise UsageError(f"--steps must be at least 1, not {steps}.")
    if warmup is not None and warmup < 0:
        raise UsageError(f"--warmup must be at least 0, not {warmup}.")
    if pipeline.train_step is None:
        raise UsageError(
            f"{pipeline.target} has no train_step: return a dict with 'dataset', 'model' and "
            "'train_step' (train_step(model, batch) or train_step(batch)), or wrap your own loop "
            "with ss.watch(loader)."
        )
    call, call_style = step_caller(pipeline.train_step, pipeline.model)
    config = config or pipeline.baseline
    warmup = default_warmup(config) if warmup is None else warmup
    info = rank_info()
    total = warmup + steps
    model = prepare_model(pipeline.model, device)
    if model is not None and call_style == "train_step(model, batch)":
        call, _ = step_caller(pipeline.train_step, model)
    length = pipeline.length()
    if info.world_size > 1 and not pipeline.is_iterable and length:
        # Each rank reads its own shard, as a DistributedSampler would.
        sampler = RankShardSampler(length, total * config.batch_size, info.rank, info.world_size)
        loader = build_loader(pipeline, config, sampler=sampler, timeout=timeout, drop_last=False)
    else:
        # One process: the user's own batches, epoch after epoch (NOTE [loader fidelity]).
        loader = build_loader(pipeline, config, cycle=total, timeout=timeout)
    move = device != "cpu"
    options: dict[str, Any] = {
        "warmup": warmup,
        "name": "profile",
        "sample_interval": sample_interval,
        "sync": sync,
        # a batch sampler of the user's decides the batch sizes: no samples per step then
        "batch_size": None if pipeline.batch_sampler is not None else config.batch_size,
    }
    options.update(watch_options or {})
    watch = Watch(loader, **options)

    def step(batch: Any) -> Any:
        return call(to_device(batch, device, non_blocking=True) if move else batch)

    done = 0
    cached: list[Any] = []  # the first batches, replayed with free data
    try:
        with watch:
            while done < total:
                progressed = False
                batches = iter(watch)
                while done < total:
                    try:
                        batch = next(batches)
                    except StopIteration:
                        break
                    except Exception as exc:
                        raise PipelineError(
                            f"the loader raised {describe_exception(exc)} at step {done}."
                        ) from exc
                    progressed = True
                    if free_data and len(cached) < CACHED_BATCHES:
                        cached.append(batch)
                    try:
                        step(batch)
                    except Exception as exc:
                        raise PipelineError(
                            f"train_step raised {describe_exception(exc)} at step {done}."
                        ) from exc
                    done += 1
                    if on_step is not None:
                        on_step(done, total)
                # Closing the generator ends the last step now (not at garbage collection).
                batches.close()  # type: ignore[attr-defined]
                if not progressed:
                    break
    finally:
        shutdown_iterator(watch.current_iterator)
    replay = None
    if free_data and cached:
        sync_fn, _ = resolve_sync(sync)
        replay = replay_free_data(
            step,
            cached,
            sync=sync_fn,
            clock=options.get("clock") or time.perf_counter,  # the steps' own clock
            fixed_steps=2 * REPLAY_STEPS if info.world_size > 1 else None,
        )
        cached.clear()
    context = {
        "epoch_steps": _epoch_steps(length, config.batch_size, info.world_size, pipeline.drop_last),
        "target": pipeline.target,
        "config": config.to_dict(),
        "config_label": config.label(),
        "cores": usable_cores(),
        "local_world_size": info.local_world_size,
    }
    if info.is_distributed:
        watch.gather()
    profile = watch.to_dict(context=context)
    profile.update(
        {
            "config": config.to_dict(),
            "config_label": config.label(),
            "device": device,
            "train_step_call": call_style,
            "requested_steps": steps,
            "rank": info.rank,
            "world_size": info.world_size,
        }
    )
    if replay is not None:
        profile.update(replay)
    if done < total:
        profile["note"] = f"the loader ran out after {done} of {total} steps"
    return profile


def _epoch_steps(
    length: int | None, batch_size: int, world_size: int, drop_last: bool
) -> int | None:
    """Steps in one real epoch of the user's loader on one rank (None for an unsized dataset)."""
    if not length:
        return None
    per_rank = -(-length // max(1, world_size))
    return per_rank // batch_size if drop_last else -(-per_rank // batch_size)

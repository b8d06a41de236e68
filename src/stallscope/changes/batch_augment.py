"""Batch-level augmentation: the per-sample transforms that are tensor ops run once per batch (in
the main process, or on the accelerator) instead of once per sample in the workers.

Applies to the trailing stages that take a tensor, where each one, called on the whole batch, gives
a batch of the right shape; a deterministic stage must give exactly the per-sample results. A random
stage then draws once per batch instead of once per sample: that alters what the model sees, and
the report says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .anatomy import Anatomy, StagesCompose, array_of, fresh
from .base import (
    Applied,
    MovedTail,
    batch_step_seconds,
    compared_batch,
    moved_work,
    rebuilt_compose,
    slot_step,
)
from .source import expression_of, helper_block
from .wrappers import BatchStages

TOLERANCE = 1e-5

HELPER = '''
BATCH_TRANSFORMS = [{expressions}]


def augment_batch(images):
    """Run on each batch (N×C×H×W), in the main process or on the accelerator after moving
    it there."""
    for transform in BATCH_TRANSFORMS:
        images = transform(images)
    return images
'''


def is_tensor(value: Any) -> bool:
    return hasattr(value, "dim") and hasattr(value, "is_floating_point")


class BatchAugmentation(MovedTail):
    id = "batch-augment"
    title = "Batch-level augmentation"
    tolerance = TOLERANCE

    def measure(self, anatomy: Anatomy, pipeline: Any) -> str | None:
        import torch

        n = len(anatomy.stages)
        start = n
        while start > 0:
            inputs = [s.input_to(start - 1) for s in anatomy.samples]
            if not all(is_tensor(v) for v in inputs):
                break
            start -= 1
        if start == n:
            return (
                "no per-sample transform takes a tensor (they run on images before the conversion)"
            )
        if len(anatomy.samples) < 2:
            return "too few items to compare a batch with its samples"
        for j in range(start, n):
            inputs = [s.input_to(j) for s in anatomy.samples]
            if len({tuple(v.shape) for v in inputs}) != 1:
                return (
                    f"the inputs of {anatomy.names[j]} differ in shape, so they cannot be stacked"
                )
            stacked = torch.stack([fresh(v) for v in inputs])
            try:
                out = anatomy.stages[j](stacked)
            except Exception as exc:
                return f"{anatomy.names[j]} fails on a batch ({type(exc).__name__})"
            expected = torch.stack([s.outputs[j] for s in anatomy.samples])
            if not is_tensor(out) or tuple(out.shape) != tuple(expected.shape):
                return (
                    f"{anatomy.names[j]} on a batch does not give a batch of its per-sample outputs"
                )
            if not anatomy.random[j]:
                diff = float(
                    np.max(
                        np.abs(
                            array_of(out).astype(np.float64) - array_of(expected).astype(np.float64)
                        )
                    )
                )
                if diff > TOLERANCE:
                    return f"{anatomy.names[j]} on a batch differs from per sample by {diff:.2g}"
        self.start = start
        return None

    def apply(self, anatomy: Anatomy, pipeline: Any) -> Applied:
        step = BatchStages(anatomy.item_slot or (), anatomy.stages[self.start :])
        return Applied(
            anatomy.with_compose(StagesCompose(anatomy.stages[: self.start])), main_step=step
        )

    def side_effect(self, anatomy: Anatomy, pipeline: Any, applied: Applied) -> dict[str, Any]:
        moved = anatomy.names[self.start :]
        randoms = [
            anatomy.names[j] for j in range(self.start, len(anatomy.stages)) if anatomy.random[j]
        ]
        raw, _, difference = compared_batch(anatomy, pipeline, applied)
        worker = self.worker_seconds(anatomy)
        main_cost = batch_step_seconds(applied.main_step, raw)  # type: ignore[arg-type]
        if randoms:
            summary = (
                f"alters what the model sees: {', '.join(randoms)} draw once per batch "
                f"of {pipeline.batch_size} "
                "instead of once per sample"
            )
        else:
            summary = (
                "deterministic: batches equal yours within "
                f"{difference if difference is not None else float('nan'):.1e}"
            )
        summary += (
            f"; {', '.join(moved)} leave the workers ({1000 * worker:.2f} ms per "
            "sample) and cost the main "
            f"process {1000 * main_cost:.2f} ms per batch on this CPU"
        )
        return {
            "summary": summary,
            "alters_output": bool(randoms) or difference is None or difference > TOLERANCE,
            "moved": moved,
            "random_per_batch": randoms,
            "max_abs_difference": difference,
            **moved_work(worker, main_cost),
        }

    def words(self, names: list[str]) -> str:
        return (
            f"Remove {', '.join(names)} from the per-sample transforms and run them on each batch "
            "in the training loop (images = augment_batch(images.to(device)))."
        )

    def rewrite(self, lines: list[str], first: int, last: int) -> str:
        expressions = [
            expression_of(line) for line in lines[first : last + 1] if expression_of(line)
        ]
        del lines[first : last + 1]
        return helper_block(
            "batch-level augmentation", HELPER.format(expressions=", ".join(expressions))
        )

    def rebuild(self, anatomy: Anatomy, module: Any, function: str | None) -> tuple[Any, Any]:
        compose = rebuilt_compose(module, function, anatomy, self.start, None)
        if compose.transforms and compose.transforms[-1] is None:
            compose = StagesCompose(compose.transforms[:-1])
        return anatomy.with_compose(compose), slot_step(anatomy, module.augment_batch)

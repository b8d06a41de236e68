"""Integer transfer: the workers stop converting to float and normalising; they send ``uint8``
(a quarter of the bytes through shared memory) and each batch is normalised at once in the main
process or on the accelerator. Applies where the stages from the float conversion on are, together,
a per-channel affine map of the uint8 image (ToTensor + Normalize, ConvertImageDtype + Normalize);
that is measured on the items, not assumed from names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .anatomy import Anatomy, StagesCompose, array_of, as_array
from .base import (
    Applied,
    MovedTail,
    batch_step_seconds,
    compared_batch,
    fastest_seconds,
    moved_work,
    nbytes_at,
    rebuilt_compose,
    slot_step,
)
from .source import helper_block
from .wrappers import AffineBatch, Uint8Layout

TOLERANCE = 1e-4  # float rounding of (x/255 - mean)/std against x*scale + shift

HELPER = '''
class ToUint8Tensor:
    """An image as a uint8 tensor in the layout the float conversion gave ({layout})."""

    def __call__(self, image):
        import numpy as np
        import torch

        tensor = torch.from_numpy(np.array(image, dtype=np.uint8, copy=True))
        return {convert}

'''

# The helper both integer transfers append: ``made`` says what made the float batch before.
NORMALIZE_BATCH = '''
BATCH_SCALE = {scale!r}
BATCH_SHIFT = {shift!r}


def normalize_batch(images):
    """A uint8 batch from the loader -> the float batch {made}. Call it on
    each batch, after moving it to the accelerator: images = normalize_batch(images.to(device))."""
    import torch

    shape = [1] * images.dim()
    shape[{channel}] = len(BATCH_SCALE)
    scale = torch.tensor(BATCH_SCALE, dtype=torch.float32, device=images.device).view(shape)
    shift = torch.tensor(BATCH_SHIFT, dtype=torch.float32, device=images.device).view(shape)
    return images.float().mul_(scale).add_(shift)
'''


def normalize_batch_helper(scale: list[float], shift: list[float], channel: int, made: str) -> str:
    """The source of ``normalize_batch`` for a per-channel ``x * scale + shift`` on ``channel``
    of each batch (1 + the channel axis of an item)."""
    return NORMALIZE_BATCH.format(
        scale=[round(v, 9) for v in scale],
        shift=[round(v, 9) for v in shift],
        channel=channel,
        made=made,
    )


def is_uint8_image(value: Any) -> bool:
    array = as_array(value)
    return array is not None and array.dtype == np.uint8 and array.ndim in (2, 3)


def is_float_tensor(value: Any) -> bool:
    return hasattr(value, "is_floating_point") and value.is_floating_point()


class IntegerTransfer(MovedTail):
    id = "integer-transfer"
    title = "Integer transfer (uint8 to the main process)"
    tolerance = TOLERANCE

    def measure(self, anatomy: Anatomy, pipeline: Any) -> str | None:
        first = anatomy.samples[0]
        start = next(
            (
                j
                for j in range(len(anatomy.stages))
                if is_uint8_image(first.input_to(j)) and is_float_tensor(first.outputs[j])
            ),
            None,
        )
        if start is None:
            return "no transform turns a uint8 image into a float tensor"
        randoms = [anatomy.names[j] for j in range(start, len(anatomy.stages)) if anatomy.random[j]]
        if randoms:
            return (
                f"{', '.join(randoms)} runs on the float tensor after the conversion "
                "(random, per sample)"
            )
        before = array_of(first.input_to(start))
        after = first.outputs[-1]
        channel: int | None
        if before.ndim == 3 and tuple(after.shape) == (
            before.shape[2],
            before.shape[0],
            before.shape[1],
        ):
            permute, channel = (2, 0, 1), 0
        elif tuple(after.shape) == before.shape:
            permute, channel = None, (before.ndim - 1 if before.ndim == 3 else None)
        else:
            return (
                f"the float output's shape {tuple(after.shape)} is not a layout of the "
                f"image's {before.shape}"
            )
        layout = Uint8Layout(permute)
        xs, ys = [], []
        for sample in anatomy.samples:
            u = layout(sample.input_to(start)).numpy().astype(np.float64)
            xs.append(np.moveaxis(u, channel, 0) if channel is not None else u[None])
            y = array_of(sample.outputs[-1]).astype(np.float64)
            ys.append(np.moveaxis(y, channel, 0) if channel is not None else y[None])
        x, y = (
            np.concatenate([a.reshape(a.shape[0], -1) for a in xs], 1),
            np.concatenate([b.reshape(b.shape[0], -1) for b in ys], 1),
        )
        scale, shift = [], []
        for c in range(x.shape[0]):
            if np.ptp(x[c]) == 0:
                return "the images are flat: the per-channel map could not be measured"
            a, b = np.polyfit(x[c], y[c], 1)
            if np.max(np.abs(a * x[c] + b - y[c])) > TOLERANCE * max(
                1.0, float(np.max(np.abs(y[c])))
            ):
                return (
                    f"{', '.join(anatomy.names[start:])} is not a per-channel scale and "
                    "shift of the uint8 image"
                )
            scale.append(float(a))
            shift.append(float(b))
        self.start, self.permute, self.channel, self.scale, self.shift = (
            start,
            permute,
            channel,
            scale,
            shift,
        )
        return None

    def _main_step(self, anatomy: Anatomy) -> AffineBatch:
        return AffineBatch(
            anatomy.item_slot or (),
            self.scale,
            self.shift,
            self.channel if self.channel is not None else 0,
        )

    def apply(self, anatomy: Anatomy, pipeline: Any) -> Applied:
        compose = StagesCompose([*anatomy.stages[: self.start], Uint8Layout(self.permute)])
        return Applied(anatomy.with_compose(compose), main_step=self._main_step(anatomy))

    def side_effect(self, anatomy: Anatomy, pipeline: Any, applied: Applied) -> dict[str, Any]:
        raw, theirs, difference = compared_batch(anatomy, pipeline, applied)
        image = anatomy.samples[0].input_to(self.start)
        worker_before = self.worker_seconds(anatomy)
        worker_after = fastest_seconds(lambda: Uint8Layout(self.permute)(image), threads=1)
        main_cost = batch_step_seconds(self._main_step(anatomy), raw)
        slot = anatomy.item_slot or ()
        bytes_before, bytes_after = nbytes_at(theirs, slot), nbytes_at(raw, slot)
        alters = difference is None or difference > TOLERANCE
        return {
            "summary": (
                f"workers send uint8 ({bytes_after / 2**20:,.2f} MB per batch instead "
                f"of {bytes_before / 2**20:,.2f} MB) "
                f"and save {1000 * (worker_before - worker_after):.2f} ms of CPU per "
                "sample; the main process adds "
                f"{1000 * main_cost:.2f} ms per batch on this CPU (less on an "
                "accelerator); batches equal yours "
                f"within {difference if difference is not None else float('nan'):.1e}"
            ),
            "alters_output": alters,
            "max_abs_difference": difference,
            "bytes_per_batch": {"before": bytes_before, "after": bytes_after},
            **moved_work(worker_before - worker_after, main_cost),
        }

    def words(self, names: list[str]) -> str:
        return (
            f"Replace {', '.join(names)} in the transforms by a conversion to a uint8 "
            "tensor, and normalise each "
            "batch in the main process or on the accelerator: x.float() * "
            f"{listed(self.scale)} + {listed(self.shift)} per channel."
        )

    def rewrite(self, lines: list[str], first: int, last: int) -> str:
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        lines[first : last + 1] = [
            f"{indent}ToUint8Tensor(),  # normalised per batch: normalize_batch()\n"
        ]
        to_uint8 = HELPER.format(
            layout="C×H×W" if self.permute else "as it is",
            convert="tensor.permute(2, 0, 1).contiguous()" if self.permute else "tensor",
        )
        channel = (self.channel if self.channel is not None else 0) + 1
        normalize = normalize_batch_helper(
            self.scale, self.shift, channel, "the per-sample transforms made"
        )
        return helper_block("integer transfer", to_uint8 + normalize)

    def rebuild(self, anatomy: Anatomy, module: Any, function: str | None) -> tuple[Any, Any]:
        compose = rebuilt_compose(module, function, anatomy, self.start, module.ToUint8Tensor())
        return anatomy.with_compose(compose), slot_step(anatomy, module.normalize_batch)


def listed(values: list[float]) -> str:
    """Per-channel values as a sentence shows them: ``(0.0171, 0.0175, 0.0174)``."""
    return "(" + ", ".join(f"{v:.6g}" for v in values) + ")"

"""A small model for ``stallscope profile stallscope.demo:pipeline_with_model``."""

from __future__ import annotations

from typing import Any

from .dataset import pipeline
from .scenes import CLASSES


def _tiny_cnn() -> Any:
    import torch.nn as nn

    # Pooling first keeps a CPU step near 0.1 s for a batch of 32: lighter than loading
    # the batch on two cores, so the demo is input-bound as many real vision jobs are.
    return nn.Sequential(
        nn.AvgPool2d(4),
        nn.Conv2d(3, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, kernel_size=3, stride=2, padding=1),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, len(CLASSES)),
    )


def train_step(model: Any, batch: Any) -> float:
    """One SGD step of the tiny classifier; the optimiser is created on the model's device."""
    import torch.nn.functional as F
    from torch.optim import SGD

    optimizer = getattr(model, "demo_optimizer", None)
    if optimizer is None:
        optimizer = SGD(model.parameters(), lr=0.01, momentum=0.9)
        model.demo_optimizer = optimizer
    images, labels = batch
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(images), labels)
    loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
    optimizer.step()
    return float(loss.detach())


def pipeline_with_model() -> dict[str, Any]:
    """TARGET ``stallscope.demo:pipeline_with_model``: the demo plus a tiny CNN and its
    train_step."""
    return {**pipeline(), "model": _tiny_cnn(), "train_step": train_step}

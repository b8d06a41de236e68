"""The built-in demo pipeline (SPEC §6): ``stallscope.demo:pipeline`` and
``stallscope.demo:pipeline_with_model`` are the TARGETs `doctor` and `profile` use.

``scenes`` paints seeded photo-like images, ``cache`` builds the image folder once (NOTE [demo
cache]), ``transforms`` holds torchvision-style augmentations in Pillow + NumPy, ``dataset`` the
ImageFolder-like dataset and :func:`pipeline`, ``model`` a tiny CNN for :func:`pipeline_with_model`.
"""

from __future__ import annotations

from .dataset import pipeline
from .model import pipeline_with_model

__all__ = ["pipeline", "pipeline_with_model"]

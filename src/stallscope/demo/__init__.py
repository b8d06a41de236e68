"""The built-in demo pipeline (SPEC §6): ``stallscope.demo:pipeline`` and
``stallscope.demo:pipeline_with_model`` are the TARGETs `doctor` and `profile` use.
"""

from __future__ import annotations

from .dataset import pipeline, pipeline_with_model

__all__ = ["pipeline", "pipeline_with_model"]

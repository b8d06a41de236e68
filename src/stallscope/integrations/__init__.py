"""Framework integrations of :mod:`stallscope.training.watch` (optional frameworks, imported lazily).

- :class:`stallscope.integrations.lightning.StallscopeCallback` — PyTorch Lightning
  (``lightning`` or ``pytorch_lightning``; works as a plain object without them).
- :class:`stallscope.integrations.huggingface.StallscopeTrainerCallback` — Hugging Face ``Trainer``.
- Plain loops need no integration: ``for batch in ss.watch(loader)``, or
  ``batch = w.next(iterator)`` / ``with w.data(): ...`` (see :class:`stallscope.training.watch.Watch`).
"""

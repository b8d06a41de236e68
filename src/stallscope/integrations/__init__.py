"""Framework integrations of :mod:`stallscope.training.watch` (optional frameworks, imported
lazily).

- :class:`stallscope.integrations.lightning.StallscopeCallback` — PyTorch Lightning
  (``lightning`` or ``pytorch_lightning``; works as a plain object without them).
- :class:`stallscope.integrations.huggingface.StallscopeTrainerCallback` — Hugging Face ``Trainer``.
- Plain loops need no integration: ``for batch in ss.watch(loader)``, or
  ``batch = w.next(iterator)`` / ``w.timed(iterator)`` / ``with w.data(): ...``
  (see :class:`stallscope.training.watch.Watch`).

Both callbacks time the wait where the framework's loop blocks on the loader
(the ``next()`` on its iterator), reaching into the loop to wrap it; where a
framework version is laid out differently they fall back to the gaps between
hooks and say so (``timing`` in the record). Each module's NOTE says where.
"""

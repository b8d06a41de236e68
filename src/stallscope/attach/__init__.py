"""``stallscope attach PID``: sample a running training process from outside, with no code change.

The probe side of attach (NOTE [attach sampling] in ``probe.py``): ``pyspy`` runs py-spy and parses
what it writes, ``processes`` finds the target's process tree (the ranks under ``torchrun``, their
DataLoader workers) and checks the target before sampling, ``frames`` marks the frames whose stage
the ``stages`` breakdown already knows (its known read/decode calls, collate, serialisation), and
``probe`` puts them together into the record's ``attach_capture``. What the samples mean (data
wait, stages, stuck threads) is judged in ``analysis/attach.py``.
"""

"""Code changes, applied and measured, not suggested (SPEC §8, issue 18 part 3).

NOTE [applied code changes]
Where the fix for a slow pipeline is a change to the user's code rather than a DataLoader
argument, stallscope applies it itself, inside its probes: wrappers around the user's dataset and
patches active only while an item is fetched in a probe process (``wrappers``). The user's files
are never written. Each applicable change (``prefix_cache``, ``reduced_decode``,
``integer_transfer``, ``batch_augment``; one module each, all shaped like ``base.Change``) then
races the best knob config in the same interleaved rounds (``race``), on the same items with the
same knobs; work a change moves to the main process runs there inside the timing
(``measure(main_step=)``). The record gets the measured speed-up with its rounds, the side effect
(measured: memory and first pass for a cache, PSNR for reduced decode, bytes and main-process cost
for integer transfer, what stops being per sample for batch-level augmentation) and the change as
a unified diff against the user's own file (``source``). A diff is shown only after the patched
module ran for two batches matching the user's (NOTE [verified snippets]); otherwise the change is
described in words with the reason. What the probes know about the pipeline (its stages, which
are random, where the transforms' output sits in an item) is measured on a few items
(``anatomy``), not assumed from names. A dataset without a transform list, doing its work inline in
``__getitem__``, is read line by line instead (NOTE [inline prefix] in ``inline``; its changes in
``inline_changes`` and ``decoders``).
"""

from __future__ import annotations

from .probe import DEFAULT_BUDGET_S, ChangesResult, all_changes, code_changes

__all__ = ["DEFAULT_BUDGET_S", "ChangesResult", "all_changes", "code_changes"]

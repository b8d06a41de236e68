"""Data stalls inside a real training loop: `ss.watch` (`watch`) and the `profile` command's loop
over the target's `train_step` (`runner`).
"""

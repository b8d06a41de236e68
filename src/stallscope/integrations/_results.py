"""What both framework callbacks share once training ends: the watch closed, every rank's figures
gathered under torchrun, the summary printed by the main process, and the results read back."""

from __future__ import annotations

from typing import Any

from ..api import Watch
from ..render.console_profile import stall_summary


class WatchResults:
    """Mixed into a callback that feeds ``watch`` from its framework's loop (``_detach`` undoes
    what the callback wrapped there)."""

    watch: Watch
    print_summary: bool
    result: dict[str, Any] | None

    def _detach(self) -> None:
        raise NotImplementedError

    def _training_ended(self, world_size: int, main_process: bool) -> None:
        self.watch.pause()
        self._detach()
        self.watch.close()
        self.result = self.watch.gather() if world_size > 1 else self.watch.to_dict()
        if self.print_summary and main_process:
            print(self.summary())

    def summary(self) -> str:
        return stall_summary(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return self.result if self.result is not None else self.watch.to_dict()

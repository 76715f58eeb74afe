"""Progress of a chaos job: a tqdm bar on a terminal, a plain line every few seconds in CI logs."""

from __future__ import annotations

import sys
import time
from typing import Any

from killdrill.chaos.report import ERRORED, VIOLATED, RunRecord

__all__ = ["ChaosProgress"]


class ChaosProgress:
    """A tqdm bar on a terminal; a plain line every few seconds in CI logs."""

    def __init__(self, total: int | None, enabled: bool | None, every_s: float = 10.0) -> None:
        self.tty = sys.stderr.isatty() if enabled is None else enabled
        self.total, self.done, self.failed, self.missed = total, 0, 0, 0
        self.start = self.last = time.monotonic()
        self.every_s = every_s
        self.bar: Any = None
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True)

    def update(self, rec: RunRecord) -> None:
        self.done += 1
        self.failed += rec.outcome in (VIOLATED, ERRORED)
        self.missed += rec.missed
        if self.bar is not None:
            self.bar.set_postfix(failures=self.failed, missed=self.missed, refresh=False)
            self.bar.update(1)
            return
        now = time.monotonic()
        if now - self.last >= self.every_s or (self.total is not None and self.done == self.total):
            self.last = now
            elapsed = now - self.start
            of = f"/{self.total}" if self.total is not None else ""
            print(
                f"killdrill chaos: {self.done}{of} runs, {elapsed:.0f}s, "
                f"{self.done / max(elapsed, 1e-9):.2f} runs/s, "
                f"{self.failed} failure(s), "
                f"{self.missed} kill(s) missed (the run ended first: not a failure)",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

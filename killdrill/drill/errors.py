"""The errors a drill raises before any case runs, and its state folder's name."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from killdrill.errors import HarnessError
from killdrill.points import ScheduleError

STATE_DIR = ".killdrill"
"""Inside each workdir: the ledger, the plan, attempt logs and the control socket."""


class DiscoveryError(HarnessError):
    """The clean run failed or reached no kill point: nothing can be drilled."""


class UnknownPointError(HarnessError, ScheduleError):
    """A scheduled point that the clean run never reached; the message lists the catalogue."""

    def __init__(self, text: str, catalogue: Sequence[str]) -> None:
        shown = ", ".join(catalogue[:40]) + (" ..." if len(catalogue) > 40 else "")
        close = difflib.get_close_matches(text.split("+")[0].split("~")[0], catalogue, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        ScheduleError.__init__(self, text, f"not reached by a clean run; {hint}the catalogue is: {shown}")

"""What a drill is asked to do (:class:`DrillOptions`) and the errors it raises before any case runs."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class DrillOptions:
    """How cases are run.  Every field has a CLI flag and a pytest ini key of the same name."""

    root: str | os.PathLike[str] | None = None  # where workdirs go (default: a new temp dir)
    timeout: float = 60.0  # seconds per attempt; a hang is a verdict
    max_attempts: int | None = None  # default: kills in the schedule + 3
    identity: Mapping[str, Sequence[str]] = field(default_factory=dict)  # "payments.charge": [fields]
    http_fakes: bool = False
    smtp_fake: bool = False  # an SMTP server on 127.0.0.1 (KILLDRILL_SMTP): messages are mailbox.send
    hooks: Mapping[str, str] = field(default_factory=dict)  # /hooks route pattern -> "keyed" | "naive"
    hook_key_header: str = "Idempotency-Key"  # where the /hooks sink reads a request's key
    between: Sequence[str] | None = None  # command run between attempts (reconciliation)
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    keep: bool = False  # keep passing workdirs too
    signal: str = "KILL"  # "TERM": drain drills (SIGTERM, SIGKILL after `grace`)
    grace: float = 5.0
    integrations: tuple[str, ...] = ()  # e.g. ("langgraph",)
    discovery_runs: int = 2  # two clean runs tell legitimately volatile fields apart
    ledger_url: str | None = None  # a shared SQLAlchemy URL instead of a SQLite file per case
    resumers: int = 1  # concurrent resumers after the first kill
    barrier: str | None = None  # with resumers: only this point is a barrier (default: all)
    workers: int = 1  # cases run in parallel by run_all
    launcher: str = "spawn"  # "fork": attempts forked from a warm template (killdrill.launcher)
    preload: tuple[str, ...] = ()  # modules the fork template imports once (beyond killdrill's own)
    checks: tuple[str, ...] = ()  # opt-in verdict checks, e.g. ("compensation_order",)
    model_script: str | None = None  # serve a scripted model on the HTTP fakes (fakes/model_script.py)
    model_variance: int | None = None  # a seed: each attempt gets other wording, tool-call ids, $vary values

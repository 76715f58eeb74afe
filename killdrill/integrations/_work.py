"""Work a service holds: lines an integration leaves on a service's stderr so a deployment does
not end its case while the service still has durable work to do.

A durable runtime recovers the work a killed process left (DBOS re-enqueues its pending
workflows on launch and runs them on its queue's next poll).  A deployment's case ends when its
driver is done; ended then, a restarted service's recovered work may or may not have run, and
the verdict would depend on that race.  So the integration says, in the process that holds the
work, ``killdrill: work pending RUN NAME`` (before the service can answer a request: recovered
at launch, or started) and ``killdrill: work done RUN`` once its body finished, either way; the
deployment keeps the services running until every pending run is done (``drill.deployment``).

Imported by the agent (through integrations) and by the harness: standard library only.
"""

from __future__ import annotations

import os
import re
import sys

from killdrill import envvars

__all__ = ["PREFIX", "dones", "said", "unfinished", "without_work", "work_line"]

PREFIX = "killdrill: work "
# a line of its own, or one a framework's log redirect prefixed (Celery's worker logs what is
# written to sys.stderr: ``[2026-12-07 18:18:40,200: WARNING/MainProcess] killdrill: work ...``)
_WHOLE = re.compile(r"^(?:[^\n]*\] )?killdrill: work (?:pending|done) [^\n]*(?:\n|$)", re.MULTILINE)
_DONE = re.compile(r"^(?:[^\n]*\] )?killdrill: work done [^\n]*(?:\n|$)", re.MULTILINE)
_LINE = re.compile(
    r"^(?:[^\n]*\] )?killdrill: work (?P<what>pending|done) (?P<run>\S+)(?: (?P<name>\S+))?$", re.MULTILINE
)


def said() -> bool:
    """Does this process say its work?  A deployment's services do (``KILLDRILL_PROCESS`` names
    one); a driver's end is the case's end anyway, and a single command's drill waits for nothing."""
    return os.environ.get(envvars.PROCESS, "driver") != "driver"


def without_work(text: str) -> str:
    """``text`` (a stderr tail) without the work lines: what a person reads is the process's own."""
    return _WHOLE.sub("", text) if PREFIX in text else text


def dones(text: str) -> tuple[str, list[str]]:
    """``text`` without its ``done`` lines, and the runs they said done."""
    runs = [m["run"] for m in _LINE.finditer(text) if m["what"] == "done"]
    if not runs:
        return text, []
    return _DONE.sub("", text), runs


def work_line(what: str, run: str, name: str = "") -> None:
    """Say that ``run`` (a unit of work, ``name``) is pending or done (flushed: a kill may follow),
    on the process's own stderr (not a framework's replacement of ``sys.stderr``: Celery's worker
    makes it a logger, whose line is prefixed and may be buffered)."""
    name = "_".join(name.split())
    line = f"{PREFIX}{what} {'_'.join(run.split())}{' ' + name if name else ''}\n"
    stream = sys.__stderr__ or sys.stderr
    try:
        stream.write(line)
        stream.flush()
    except (OSError, ValueError):
        pass


def unfinished(text: str, elsewhere: str = "") -> dict[str, str]:
    """The runs ``text`` (a process's stderr) says are pending and neither it nor ``elsewhere``
    (the other processes' stderr) says are done, with their names; the order does not matter."""
    pending: dict[str, str] = {}
    for m in _LINE.finditer(text):
        if m["what"] == "pending":
            pending.setdefault(m["run"], m["name"] or "")
    done = {m["run"] for m in _LINE.finditer(text + "\n" + elsewhere) if m["what"] == "done"}
    return {run: name for run, name in pending.items() if run not in done}

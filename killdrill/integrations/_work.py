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

__all__ = ["PREFIX", "said", "unfinished", "without_work", "work_line"]

PREFIX = "killdrill: work "
_WHOLE = re.compile(r"^killdrill: work (?:pending|done) [^\n]*(?:\n|$)", re.MULTILINE)
_LINE = re.compile(r"^killdrill: work (?P<what>pending|done) (?P<run>\S+)(?: (?P<name>\S+))?$", re.MULTILINE)


def said() -> bool:
    """Does this process say its work?  A deployment's services do (``KILLDRILL_PROCESS`` names
    one); a driver's end is the case's end anyway, and a single command's drill waits for nothing."""
    return os.environ.get(envvars.PROCESS, "driver") != "driver"


def without_work(text: str) -> str:
    """``text`` (a stderr tail) without the work lines: what a person reads is the process's own."""
    return _WHOLE.sub("", text) if PREFIX in text else text


def work_line(what: str, run: str, name: str = "") -> None:
    """Say that ``run`` (a unit of work, ``name``) is pending or done (flushed: a kill may follow)."""
    name = "_".join(name.split())
    line = f"{PREFIX}{what} {'_'.join(run.split())}{' ' + name if name else ''}\n"
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
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

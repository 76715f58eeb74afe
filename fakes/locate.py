"""How a fake finds its drill when whatever started it stripped the environment.

MCP clients start a stdio server with a minimal environment by default (the ``mcp`` SDK's
``get_default_environment``: ``HOME``, ``PATH``, ...; the Agents SDK's ``MCPServerStdio`` uses
it), so a counting MCP server or proxy started by an agent under a drill sees no
``KILLDRILL_LEDGER``.  Recording into a ledger of its own would prove nothing and stay green, so
:func:`adopt` looks for the drill where it still is: the nearest ancestor owned by this user whose
initial environment (``/proc/PID/environ``) carries the drill's control channel, the agent the
drill launched.  Its ``KILLDRILL_*`` variables are copied into this process's environment (the
ledger, thread, attempt, and the control channel ``boundary`` reports to).

Three answers, told apart:

- the drill was found (in this environment or an ancestor's): the fake records into its ledger;
- no ancestor was started by a drill: not under a drill (a run by hand);
- an ancestor was started by one of killdrill's fork templates but none shows the drill's variables (a
  server re-parented to the attempt's keeper): :class:`DrillNotFound`, one line saying why and
  what to pass; never a ledger of its own.

An agent forked from the pre-imported template (``--launcher fork``) shows the template's
environment in ``/proc``, not its own: it writes its drill variables to a file it holds open
(killdrill.process.template), which :func:`adopt` finds through ``/proc/PID/fd``.

``{ledger}``, ``{thread}``, ``{workdir}``, ``{attempt}`` and ``{KILLDRILL_NAME}`` in a ``--ledger``
value are filled from the drill's variables (:func:`fill`), found the same way.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator

from killdrill import envvars
from killdrill.errors import HarnessError

__all__ = ["TEMPLATE_MARK", "DrillNotFound", "adopt", "fill"]

TEMPLATE_MARK = envvars.TEMPLATE
"""Set in the environment of killdrill's fork templates (killdrill.process.forks): a
process whose ancestor shows it runs under a drill, even where no ancestor shows the drill's variables."""

_DRILL = (envvars.CONTROL, envvars.LEDGER)
_SHORT = {
    "ledger": envvars.LEDGER,
    "thread": envvars.THREAD,
    "workdir": envvars.WORKDIR,
    "attempt": envvars.ATTEMPT,
}
_PLACEHOLDER = re.compile(r"\{(ledger|thread|workdir|attempt|" + envvars.PREFIX + r"[A-Z0-9_]+)\}")
_STRIPPED = (
    "the MCP client started this server with a minimal environment (the mcp SDK's default):"
    f" pass it the agent's environment (env=dict(os.environ)) or --ledger {{{envvars.LEDGER}}}"
)


class DrillNotFound(HarnessError):
    """Under a drill, but the drill's ledger cannot be found: the fake refuses to record."""


def adopt() -> int | None:
    """Make this process's environment carry the drill's variables when whatever started it stripped them.

    Returns the pid they were read from (None: this environment has them, or not under a drill);
    raises :class:`DrillNotFound` when an ancestor was launched by a drill that cannot be read.
    """
    if all(os.environ.get(name) for name in _DRILL):
        return None
    for pid, environ in _ancestors():
        if all(environ.get(name) for name in _DRILL):
            for name, value in environ.items():
                if name.startswith(envvars.PREFIX):
                    os.environ.setdefault(name, value)
            return pid
        if TEMPLATE_MARK in environ:
            shown = _shown(pid)  # an agent forked from the template shows its variables in a file
            if all(shown.get(name) for name in _DRILL):
                for name, value in shown.items():
                    os.environ.setdefault(name, value)
                return pid
            raise DrillNotFound(
                f"killdrill: this fake runs under a drill but cannot find its ledger (process {pid},"
                f" started by killdrill's fork template, shows no drill variables): {_STRIPPED}"
            )
    return None


def fill(value: str) -> str:
    """``value`` with its placeholders filled from the drill's variables (found by :func:`adopt`)."""
    if "{" not in value:
        return value
    adopt()

    def one(m: re.Match[str]) -> str:
        name = _SHORT.get(m.group(1), m.group(1))
        found = os.environ.get(name)
        if not found:
            raise DrillNotFound(
                f"killdrill: {value!r} names the drill's {name}, but no drill shows it to this process"
                " (not under a drill, or an environment stripped by what the agent started it with: pass the"
                " agent's environment to what it starts)"
            )
        return found

    return _PLACEHOLDER.sub(one, value)


def _shown(pid: int) -> dict[str, str]:
    """The drill variables a forked agent wrote to ``killdrill-env-PID.json`` and holds open
    (killdrill.process.template); nothing when ``pid`` holds no such file of this user."""
    name = f"killdrill-env-{pid}.json"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return {}
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if os.path.basename(target) != name or os.stat(target).st_uid != os.getuid():
                continue
            with open(target) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k.startswith(envvars.PREFIX) and isinstance(v, str)}
    return {}


def _ancestors() -> Iterator[tuple[int, dict[str, str]]]:
    """This process's ancestors owned by this user, nearest first, with their initial environment."""
    uid, pid, seen = os.getuid(), os.getppid(), set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        base = f"/proc/{pid}"
        try:
            if os.stat(base).st_uid != uid:
                return
            with open(f"{base}/environ", "rb") as f:
                raw = f.read()
            with open(f"{base}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return
        environ: dict[str, str] = {}
        for item in raw.split(b"\0"):
            name, sep, val = item.partition(b"=")
            if sep and name.startswith(envvars.PREFIX.encode()):
                environ[name.decode(errors="replace")] = val.decode(errors="surrogateescape")
        yield pid, environ
        pid = int(stat[stat.rindex(b")") + 2 :].split()[1])  # the field after the state

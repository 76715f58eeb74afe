"""Setup mistakes a drill would otherwise pass silently, each said in one line.

- The agent imports LangGraph (or DBOS) but its integration is off: only the fakes'
  ``during:`` points get drilled.  Discovery runs carry ``KILLDRILL_DETECT`` and the bootstrap
  on ``PYTHONPATH``; the bootstrap's import watch leaves a marker file in the workdir when the
  agent imports a module that has an integration.
- The command has neither ``{workdir}`` nor ``{thread}``: unless the agent reads
  ``KILLDRILL_WORKDIR``/``KILLDRILL_THREAD``, every case shares one checkpoint and resumes the
  previous case's finished run (every case then reads ``point_not_reached``).
- A fixed ``--thread t1`` beside ``{workdir}``: the cases stay isolated by their workdirs, so the
  verdict stands, but thread-derived values go unchecked and state kept by thread elsewhere is
  shared.
- A clean run in a fresh workdir, under the first clean run's thread, reached fewer points than
  the first: the state is shared between runs (the same mistake, proven rather than guessed).
  Fewer points under *another* thread proves nothing: the work may depend on the thread.

They are :class:`SetupWarning` warnings: the CLI prints them as ``killdrill: warning: ...``,
pytest lists them in its warnings summary.
"""

from __future__ import annotations

import os
import re
import shlex
import warnings
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "DETECT_ENV",
    "WATCHED",
    "SetupWarning",
    "detection_env",
    "diverged_hint",
    "fixed_thread_hint",
    "imported_modules",
    "integration_hint",
    "placeholder_hint",
    "warn",
]

DETECT_ENV = "KILLDRILL_DETECT"
"""Comma-separated top-level modules whose import the bootstrap records (discovery only)."""

WATCHED = ("langgraph", "agents", "crewai", "workflows", "temporalio", "dbos")
"""Modules with an integration: importing one without it is worth a warning."""

MARKER_PREFIX = "imported-"
_FLAG = {"langgraph": "--langgraph"}
INTEGRATION_OF = {"agents": "openai_agents", "workflows": "llama_index", "temporalio": "temporal"}
"""A watched module whose integration has another name (the OpenAI Agents SDK imports as ``agents``;
``llama-index-workflows`` installs ``workflows``, which ``llama_index.core.workflow`` imports too)."""
_WHAT = {
    "agents": "function tool and session save",
    "crewai": "flow method",
    "workflows": "workflow step",
    "temporalio": "activity",
    "dbos": "step and workflow, before and after DBOS records it",
}


class SetupWarning(UserWarning):
    """A likely setup mistake: the drill runs, but may test less than the user thinks."""


def detection_env(env: Mapping[str, str], integrations: Iterable[str], bootstrap: str) -> dict[str, str]:
    """``env`` plus the import watch for every watched module whose integration is off."""
    active = set(integrations)
    watch = [m for m in WATCHED if INTEGRATION_OF.get(m, m) not in active]
    out = dict(env)
    if not watch:
        return out
    out[DETECT_ENV] = ",".join(watch)
    path = out.get("PYTHONPATH", "")
    if bootstrap not in path.split(os.pathsep):
        out["PYTHONPATH"] = os.pathsep.join(filter(None, [bootstrap, path]))
    return out


def imported_modules(state_dir: str | os.PathLike[str]) -> set[str]:
    """Watched modules the agent imported during a run (markers left by the bootstrap)."""
    try:
        names = os.listdir(state_dir)
    except OSError:
        return set()
    return {n[len(MARKER_PREFIX) :] for n in names if n.startswith(MARKER_PREFIX)}


def integration_hint(imported: Iterable[str], integrations: Iterable[str]) -> str | None:
    missing = sorted(m for m in set(imported) if INTEGRATION_OF.get(m, m) not in set(integrations))
    if not missing:
        return None
    module = missing[0]
    name = INTEGRATION_OF.get(module, module)
    return (
        f"the agent imports {module} but the {name} integration is off, so only the fakes' during: points "
        f"are drilled: add {_FLAG.get(name, f'--integration {name}')} (pytest: killdrill_integrations = "
        f"{name}) to kill it at every {_WHAT.get(module, 'node and checkpoint')}"
    )


def placeholder_hint(command: Sequence[str]) -> str | None:
    if any("{workdir}" in a or "{thread}" in a for a in command):
        return None
    return (
        "the command has no {workdir} or {thread}: unless the agent reads KILLDRILL_WORKDIR and "
        "KILLDRILL_THREAD, every case shares one checkpoint and resumes the last case's finished run; "
        "e.g. add --thread '{thread}' --db '{workdir}/ckpt.sqlite'"
    )


_THREAD_FLAG = re.compile(r"--(thread|thread[-_]id|session[-_]id|workflow[-_]id|run[-_]id)$")


def fixed_thread_hint(command: Sequence[str]) -> str | None:
    """``--thread t1`` with ``{workdir}`` elsewhere: each case's own checkpoint still isolates it,
    but the two clean runs cannot be told apart by thread (thread-derived values go unchecked) and
    state the agent keeps by thread outside the workdir (a server, a database URL) is shared."""
    if not any("{workdir}" in a for a in command) or any("{thread}" in a for a in command):
        return None
    for i, arg in enumerate(command):
        flag, eq, value = arg.partition("=")
        if not eq and i + 1 < len(command):
            value = command[i + 1]
        if _THREAD_FLAG.match(flag) and value and not value.startswith("-"):
            return (
                f"{flag} {value} is the same in every case: the drill cannot tell values derived from "
                "the thread from constant ones, and state kept by thread outside the workdir (a server, "
                f"a database) is shared between cases; use {flag} '{{thread}}'"
            )
    return None


def diverged_hint(command: Sequence[str], first: int, second: int) -> str | None:
    """Two clean runs of one thread, each in a fresh workdir, should reach the same number of points."""
    if second >= first:
        return None
    return (
        f"a second clean run of {shlex.join(command)} under the same thread reached {second} kill "
        f"point(s), the first {first}: "
        "the runs share state outside their workdir (a fixed checkpoint path?); give each case its own "
        "with {workdir} and {thread} in the command"
    )


def warn(message: str | None) -> None:
    if message:
        warnings.warn(SetupWarning(message), stacklevel=3)

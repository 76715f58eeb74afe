"""Setup mistakes a drill would otherwise pass silently, each said in one line.

- The agent imports a framework but its integration is off: only the fakes' ``during:`` points
  get drilled.  Discovery runs carry ``KILLDRILL_DETECT`` (each watched top-level module with the
  distributions it must come from, read from the integrations' records) and the bootstrap on
  ``PYTHONPATH``; the bootstrap's import watch leaves a marker file in the workdir when the agent
  imports such a module *from one of those distributions* (an agent's own ``workflows.py`` is
  not the framework's).  A framework run inside an active integration's runtime (an agent
  framework through a durable runtime's plugin: ``Integration.covers``) is drilled by it: its
  covering module is watched too, and when the agent imports it no warning is said.
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
from importlib.metadata import packages_distributions

from killdrill import envvars
from killdrill.integrations import Integration, find, known

__all__ = [
    "DETECT_ENV",
    "SetupWarning",
    "covering",
    "detection_env",
    "diverged_hint",
    "fixed_thread_hint",
    "imported_modules",
    "integration_hint",
    "placeholder_hint",
    "warn",
    "watched",
]

DETECT_ENV = envvars.DETECT
"""``MODULE=DIST|DIST,...``: top-level modules whose import the bootstrap records (discovery
only), each counted only when its file belongs to one of the distributions named."""

MARKER_PREFIX = "imported-"


def _modules_of(integration: Integration) -> dict[str, tuple[str, ...]]:
    """The record's top-level modules, each with the record's distributions that provide it (those
    not installed here: all of the record's, the agent's interpreter checks)."""
    mods = list(integration.modules)
    if not mods:  # a record that names distributions only: their top-level modules, as installed here
        provided = packages_distributions()
        mods = [m for m, dists in provided.items() if set(dists) & set(integration.distributions)]
    return {m: integration.distributions for m in mods if integration.distributions}


def watched(active: Iterable[str]) -> dict[str, tuple[str, Integration]]:
    """Each watched module, the distributions it must come from and its integration, for every
    known integration not in ``active``."""
    on: set[str] = set()
    for name in active:
        try:
            on.add(find(name).name)
        except ImportError:  # said in one line by the agent's bootstrap
            on.add(name)
    out: dict[str, tuple[str, Integration]] = {}
    for integration in known().values():
        if integration.name in on:
            continue
        for module, dists in _modules_of(integration).items():
            out.setdefault(module, ("|".join(dists), integration))
    return out


def covering(active: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Each module of an active integration that runs another framework inside its runtime, with
    the distributions it must come from and the inner integration's name (``Integration.covers``)."""
    out: dict[str, tuple[str, str]] = {}
    for name in active:
        try:
            outer = find(name)
        except ImportError:
            continue
        for inner, module in outer.covers:
            out.setdefault(module, ("|".join(outer.distributions), _canonical(inner)))
    return out


def _canonical(name: str) -> str:
    try:
        return find(name).name
    except ImportError:
        return name


class SetupWarning(UserWarning):
    """A likely setup mistake: the drill runs, but may test less than the user thinks."""


def detection_env(env: Mapping[str, str], integrations: Iterable[str], bootstrap: str) -> dict[str, str]:
    """``env`` plus the import watch for every framework whose integration is off."""
    integrations = list(integrations)
    watch = {m: dists for m, (dists, _) in watched(integrations).items()}
    if watch:  # the covering modules matter only where something is watched
        watch.update({m: dists for m, (dists, _) in covering(integrations).items() if dists})
    out = dict(env)
    if not watch:
        return out
    out[DETECT_ENV] = ",".join(f"{module}={dists}" for module, dists in watch.items())
    path = out.get("PYTHONPATH", "")
    if bootstrap not in path.split(os.pathsep):
        out["PYTHONPATH"] = os.pathsep.join(filter(None, [bootstrap, path]))
    return out


def imported_modules(state_dir: str | os.PathLike[str]) -> set[str]:
    """Watched modules the agent imported from their distributions during a run (the bootstrap's markers)."""
    try:
        names = os.listdir(state_dir)
    except OSError:
        return set()
    return {n[len(MARKER_PREFIX) :] for n in names if n.startswith(MARKER_PREFIX)}


def integration_hint(imported: Iterable[str], integrations: Iterable[str]) -> str | None:
    integrations, imported = list(integrations), set(imported)
    watch = watched(integrations)
    covered = {inner for module, (_, inner) in covering(integrations).items() if module in imported}
    missing = sorted(m for m in imported if m in watch and watch[m][1].name not in covered)
    if not missing:
        return None
    module = missing[0]
    record = watch[module][1]
    name = record.name
    return (
        f"the agent imports {module} but the {name} integration is off, so only the fakes' during: points "
        f"are drilled: add {record.flag or f'--integration {name}'} (pytest: killdrill_integrations = "
        f"{name}) to kill it at every {record.hint}"
    )


def placeholder_hint(command: Sequence[str]) -> str | None:
    if any("{workdir}" in a or "{thread}" in a for a in command):
        return None
    return (
        f"the command has no {{workdir}} or {{thread}}: unless the agent reads {envvars.WORKDIR} and "
        f"{envvars.THREAD}, every case shares one checkpoint and resumes the last case's finished run; "
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

"""Setup mistakes that are usage errors, said before any case runs (exit 2, one line).

- A file named in the command, outside the workdir (``--db ckpt.json``, no ``{workdir}``), that a
  clean run wrote, while the clean runs did different work or the first found nothing to do:
  every case then resumes or collides with another run's checkpoint (``point_not_reached``
  everywhere, "not deterministic").  Proven from the runs, never guessed from the name alone: a
  log file at a fixed path is harmless while the runs agree.
- An ``--integration NAME`` nobody provides: the drill would run without its kill points and
  drill only the fakes' ``during:`` points.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from killdrill.errors import UsageError
from killdrill.integrations import find

__all__ = ["SharedStateError", "check_integrations", "fixed_paths", "shared_state_error"]


class SharedStateError(UsageError):
    """The command's clean runs share state outside their workdir."""


def _candidates(command: Sequence[str]) -> list[str]:
    """Arguments that may name a file the agent writes: not the program, not a script, no placeholder."""
    out = []
    for arg in command[1:]:
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        if not value or value.startswith("-") or "{" in value or value.endswith(".py"):
            continue
        if "/" in value or "." in os.path.basename(value):
            out.append(value)
    return out


def fixed_paths(command: Sequence[str], cwd: str | None) -> dict[str, float | None]:
    """Each candidate path's modification time now (None: absent), to compare after a clean run."""
    out: dict[str, float | None] = {}
    for value in _candidates(command):
        path = os.path.join(cwd or os.getcwd(), value)
        try:
            out[value] = os.stat(path).st_mtime_ns if os.path.isfile(path) else None
        except OSError:
            out[value] = None
    return out


def shared_state_error(
    before: Mapping[str, float | None], cwd: str | None, *, found_nothing: bool, differed: str
) -> SharedStateError | None:
    """The error, when a fixed path was written by the clean runs (or was there before and the first
    run found nothing to do) and the runs show it: one line naming the path and the fix."""
    if not (found_nothing or differed):
        return None
    for value, then in before.items():
        path = os.path.join(cwd or os.getcwd(), value)
        try:
            now: float | None = os.stat(path).st_mtime_ns if os.path.isfile(path) else None
        except OSError:
            now = None
        written = now is not None and now != then
        if not (written or (found_nothing and then is not None)):
            continue
        what = (
            "the first clean run found a finished run in it (left by an earlier run)"
            if found_nothing and not written
            else "the clean runs wrote it and "
            + (
                "the first found nothing to do"
                if found_nothing
                else f"did different work ({differed.split(';')[0]})"
            )
        )
        fixed = os.path.basename(value)  # its name, under each case's own workdir
        return SharedStateError(
            f"the command names a fixed path outside the workdir, {value}: {what}, so every case would "
            f"share that state (a fixed checkpoint path); give each case its own: '{{workdir}}/{fixed}'"
            " (and --thread '{thread}')"
        )
    return None


def check_integrations(names: Iterable[str]) -> None:
    """An unknown ``--integration NAME`` is a usage error, said with the names that exist."""
    for name in names:
        try:
            find(name)
        except ImportError as exc:
            if exc.__class__.__name__ != "IntegrationNotFound":
                raise UsageError(f"integration {name!r} cannot be loaded: {exc}") from exc
            raise UsageError(str(exc)) from exc

"""Setup mistakes that are usage errors, said before any case runs (exit 2, one line).

- A file named in the command, outside the workdir (``--db ckpt.json``, no ``{workdir}``), that a
  clean run wrote, while the clean runs did different work or the first found nothing to do:
  every case then resumes or collides with another run's checkpoint (``point_not_reached``
  everywhere, "not deterministic").  Proven from the runs, never guessed from the name alone: a
  log file at a fixed path is harmless while the runs agree.
- The same fixed path (a file, or a runtime's database folder or a session store) written by the
  clean runs while they agree: a warning, not an error (it may be a log file), that names it; it
  is every case's shared state if the agent keeps its checkpoint there.
- An ``--integration NAME`` nobody provides: the drill would run without its kill points and
  drill only the fakes' ``during:`` points.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence

from killdrill.errors import UsageError
from killdrill.integrations import find

__all__ = ["SharedStateError", "check_integrations", "fixed_paths", "shared_path_hint", "shared_state_error"]


class SharedStateError(UsageError):
    """The command's clean runs share state outside their workdir."""


_PATH_FLAG = re.compile(r"--?[\w-]*(db|dir|path|state|store|checkpoint|data|session|file)[\w-]*$", re.I)


def _candidates(command: Sequence[str], cwd: str) -> list[str]:
    """Arguments that may name a file or folder the agent writes: not the program, not a script,
    no placeholder; a path-like value, one that exists, or the value of a path-like flag."""
    out = []
    for i, arg in enumerate(command[1:], start=1):
        flag, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if not eq:
            flag, value = command[i - 1] if i > 1 else "", arg
        if value in ("", ".", "..") or value.startswith("-") or "{" in value or value.endswith(".py"):
            continue
        if (
            "/" in value
            or "." in os.path.basename(value)
            or os.path.exists(os.path.join(cwd, value))
            or _PATH_FLAG.match(flag)
        ):
            out.append(value)
    return out


def _written(path: str) -> int | None:
    """When ``path`` was last written (ns): a file's mtime, a folder's newest entry's (None: absent)."""
    try:
        newest = os.stat(path).st_mtime_ns
    except OSError:
        return None
    if os.path.isdir(path):
        for n, (folder, _, files) in enumerate(os.walk(path)):
            for name in (folder, *(os.path.join(folder, f) for f in files)):
                with contextlib.suppress(OSError):
                    newest = max(newest, os.stat(name).st_mtime_ns)
            if n > 200:  # a big tree: its first folders tell a write from none well enough
                break
    return newest


def fixed_paths(command: Sequence[str], cwd: str | None) -> dict[str, float | None]:
    """Each candidate path's last write now (None: absent), to compare after a clean run."""
    base = cwd or os.getcwd()
    return {value: _written(os.path.join(base, value)) for value in _candidates(command, base)}


def shared_state_error(
    before: Mapping[str, float | None], cwd: str | None, *, found_nothing: bool, differed: str
) -> SharedStateError | None:
    """The error, when a fixed path was written by the clean runs (or was there before and the first
    run found nothing to do) and the runs show it: one line naming the path and the fix."""
    if not (found_nothing or differed):
        return None
    for value, then in before.items():
        now = _written(os.path.join(cwd or os.getcwd(), value))
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


def shared_path_hint(before: Mapping[str, float | None], cwd: str | None) -> str | None:
    """A warning when the clean runs wrote a fixed path outside the workdir although they agree:
    every case shares it, which is wrong if it holds the agent's checkpoint (harmless for a log)."""
    for value, then in before.items():
        now = _written(os.path.join(cwd or os.getcwd(), value))
        if now is None or now == then:
            continue
        held = "it existed before the drill" if then is not None else "the clean runs created it"
        return (
            f"the clean runs wrote {value}, a fixed path outside the workdir ({held}): every case "
            f"shares it; if the agent keeps its checkpoint there, each case resumes another's run: "
            f"give each case its own, '{{workdir}}/{os.path.basename(value.rstrip('/'))}'"
        )
    return None

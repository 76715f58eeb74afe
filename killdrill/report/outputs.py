"""Output paths, checked before any case runs: a report that cannot be written is a one-line
usage error at the start, not a lost drill at the end."""

from __future__ import annotations

import os
import tempfile

from killdrill.errors import UsageError

__all__ = ["check_output_dir", "check_output_file"]


def check_output_file(path: str | None, flag: str) -> None:
    """Fail now, in one line, if ``path`` cannot be written: before any case runs, not after."""
    if not path:
        return
    target = os.path.abspath(path)
    if os.path.isdir(target):
        raise UsageError(f"{flag} {path}: is a folder, expected a file")
    check_output_dir(os.path.dirname(target), f"{flag} {path}")


def check_output_dir(path: str | os.PathLike[str] | None, flag: str) -> None:
    """Make the folder ``path`` (and its parents) and prove a file can be created in it."""
    if path is None:
        return
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".killdrill-probe-"):
            pass
    except OSError as exc:
        blocker = _first_non_folder(os.path.abspath(path))
        why = f"{blocker} is a file, not a folder" if blocker else (exc.strerror or str(exc))
        raise UsageError(f"{flag}: cannot write there: {why}") from None


def _first_non_folder(path: str) -> str | None:
    """The nearest existing ancestor of ``path`` (or itself) when it is not a folder."""
    while path and not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return path if path and not os.path.isdir(path) else None

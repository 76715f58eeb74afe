"""Output paths, checked before any case runs (a report that cannot be written is a one-line
usage error at the start, not a lost drill at the end), and written atomically (a reader never
sees half a file)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from killdrill.errors import UsageError

__all__ = ["atomic_write_text", "atomic_writer", "check_output_dir", "check_output_file"]


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


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write a temporary file next to ``path``, fsync it, rename it over ``path``: a reader (or a
    job killed mid-write) sees the old file or the new one, never a truncated one.  Every report
    file gets the umask's mode (mkstemp alone would make some 0600 beside others 0644)."""
    with atomic_writer(path) as fh:
        fh.write(text)
    return Path(path)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[TextIO]:
    """:func:`atomic_write_text` for a file written piece by piece (a chaos job's report.json and
    junit.xml, streamed from its runs: the text is never whole in memory)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process umask, read without changing it (``os.umask`` sets it, racing other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022

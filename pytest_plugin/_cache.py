"""Discovery, made once per command and options and kept in pytest's cache directory.

A discovery is two clean runs of the agent: seconds, paid at collection time for every
``discover=`` test.  It is keyed by the command, the options that change what a clean run
does, the interpreter, killdrill's version, and the size and mtime of the agent's files (the
script's folder, or the top-level package of ``-m``), so editing the agent invalidates it.
Files are written atomically and made under an exclusive lock, so xdist workers that collect
the same test at once run the discovery once and all read the same catalogue (they must: the
workers' collections have to be identical).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from killdrill.integrations import option_rows
from killdrill.options import discovery_fields

if TYPE_CHECKING:
    from killdrill.records import Discovery

# DrillOptions fields that change what a clean run does (the others only matter to cases):
# the rows of the option table marked ``discovery``, and the integrations' rows marked so.
_DISCOVERY_OPTIONS = (*discovery_fields(), *(row.field for row in option_rows() if row.discovery))
_MAX_FILES = 5000


@dataclass(frozen=True)
class Key:
    digest: str
    data: dict[str, Any]


def _stat_files(paths: Iterator[Path]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for p in paths:
        if len(out) >= _MAX_FILES:
            break
        try:
            st = p.stat()
        except OSError:
            continue
        out.append([str(p), st.st_size, st.st_mtime_ns])
    return out


def _walk_py(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield Path(dirpath, name)


def agent_files(command: Sequence[str], cwd: str | None = None) -> list[list[Any]]:
    """Size and mtime of the files a command's behaviour most likely depends on.

    A script argument: its folder's ``*.py``.  ``-m pkg.mod``: every ``*.py`` of the top-level
    package (found without importing it).  Whatever this misses, ``--killdrill-rediscover`` forces.
    """
    base = Path(cwd or os.getcwd())
    files: list[Path] = []
    args = list(command)
    for i, arg in enumerate(args):
        if "{" in arg:
            continue
        if i > 0 and args[i - 1] == "-m":
            top = arg.split(".", 1)[0]
            try:
                spec = importlib.util.find_spec(top)
            except (ImportError, ValueError):
                spec = None
            if spec is not None and spec.submodule_search_locations:
                for loc in spec.submodule_search_locations:
                    files.extend(_walk_py(Path(loc)))
            elif spec is not None and spec.origin and os.path.exists(spec.origin):
                files.append(Path(spec.origin))
            continue
        path = base / arg
        if arg.endswith(".py") and path.is_file():
            files.extend(sorted(path.resolve().parent.glob("*.py")))
        elif path.is_file() and i == 0:
            files.append(path.resolve())
    return _stat_files(iter(dict.fromkeys(files)))


def discovery_key(command: Sequence[str], options: Mapping[str, Any]) -> Key:
    from killdrill import __version__

    files = agent_files(command, options.get("cwd"))
    for service in (options.get("serve") or {}).values():  # a deployment's services are its code too
        files += agent_files(service, options.get("cwd"))
    if options.get("model_script"):  # editing the model's script changes what a clean run does
        files += _stat_files(iter([Path(options.get("cwd") or os.getcwd(), options["model_script"])]))
    if options.get("existing"):  # so does editing the objects the runs start with
        files += _stat_files(iter([Path(os.getcwd(), options["existing"])]))
    data = {
        "command": list(command),
        "options": {k: options.get(k) for k in _DISCOVERY_OPTIONS},
        "python": sys.executable,
        "killdrill": __version__,
        "files": files,
    }
    text = json.dumps(data, sort_keys=True, default=str)
    # the key data is compared after a JSON round trip, so keep its JSON form
    return Key(hashlib.sha256(text.encode()).hexdigest()[:24], json.loads(text))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class DiscoveryCache:
    """In memory for the session, on disk across sessions and xdist workers (when a cache
    directory exists: ``-p no:cacheprovider`` leaves only the in-memory part)."""

    def __init__(self, directory: Path | None, *, token: str, force: bool = False) -> None:
        self.directory = directory
        self.token = token  # the session (shared by its xdist workers)
        self.force = force  # --killdrill-rediscover: only entries made by this session count
        self._memory: dict[str, Discovery] = {}
        self.made = 0  # discoveries this process ran (the tests check the cache with it)

    def get_or_make(self, key: Key, make: Callable[[], Discovery]) -> Discovery:
        found = self._memory.get(key.digest)
        if found is not None:
            return found
        if self.directory is None:
            found = self._make(make)
        else:
            path = self.directory / f"discovery-{key.digest}.json"
            with _locked(self.directory / f"discovery-{key.digest}.lock"):
                found = self._read(path, key)
                if found is None:
                    found = self._make(make)
                    self._write(path, key, found)
        self._memory[key.digest] = found
        return found

    def _make(self, make: Callable[[], Discovery]) -> Discovery:
        self.made += 1
        return make()

    def _read(self, path: Path, key: Key) -> Discovery | None:
        from killdrill.records import Discovery

        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("key") != key.data or (self.force and data.get("token") != self.token):
                return None
            return Discovery.from_dict(data["discovery"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing or unreadable: discover again

    def _write(self, path: Path, key: Key, discovery: Discovery) -> None:
        payload = {"key": key.data, "token": self.token, "discovery": discovery.to_dict()}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, default=str)
            os.replace(tmp, path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)

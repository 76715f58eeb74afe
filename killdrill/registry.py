"""The one registry type: named things of one kind (fake providers, checks, integrations).

Each kind is declared in-process (``register``) or by another distribution through an entry-point
group, and killdrill's own are loaded by module name the first time the registry is read. Three
rules hold for all of them: a name declared again with a *different* declaration is refused
(two things under one name would be judged as one); the entry points are scanned only when a
name is not among those already known, or the whole registry is read (an agent that uses only
built-ins does not pay the ~40 ms scan); and a stage counts as loaded only once every import of
it is done, so another thread never reads a registry without its built-ins.

Standard library and ``errors`` only: the agent reads the provider registry at start.
"""

from __future__ import annotations

import difflib
import importlib
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from killdrill.errors import UsageError

__all__ = ["Registry"]

T = TypeVar("T")



def _fold(name: str) -> str:
    return name.casefold().replace("-", "_")


def nearest(word: str, candidates: Sequence[str]) -> str | None:
    """The candidate a user most likely meant by ``word``: one equal to it but for case and
    ``-``/``_`` (``Foo``, ``foo-bar`` for ``foo_bar``) first, else the closest by difflib's ratio (>= 0.6)
    on those folded forms; None if nothing is close."""
    folded = {_fold(c): c for c in reversed(list(candidates))}
    if _fold(word) in folded:
        return folded[_fold(word)]
    found = difflib.get_close_matches(_fold(word), list(folded), n=1, cutoff=0.6)
    return folded[found[0]] if found else None


class Registry(Generic[T]):
    """``what`` things by name; ``group``: their entry-point group; ``builtins``: modules whose
    import registers killdrill's own; ``same``: whether a second declaration is the first one;
    ``find``: a lookup of a name nobody registered (a module named after it, for integrations)."""

    def __init__(
        self,
        what: str,
        group: str,
        *,
        builtins: Sequence[str] = (),
        same: Callable[[T, T], bool] = operator.eq,
        find: Callable[[str], T | None] | None = None,
    ) -> None:
        self.what = what
        self.group = group
        self.builtins = tuple(builtins)
        self._same = same
        self._find = find
        self._items: dict[str, T] = {}
        self._lock = threading.RLock()
        self._loaded: set[str] = set()  # the stages done: "builtins", "entry points"
        self._loading: set[str] = set()  # the stages this thread is importing now

    def register(self, name: str, item: T) -> T:
        """Declare ``item`` as ``name``; the same declaration again is a no-op."""
        with self._lock:
            known = self._items.get(name)
            if known is not None and not self._same(known, item):
                raise UsageError(f"{self.what} {name!r} is already declared differently: {known}")
            self._items[name] = item
        return item

    def _load(self, stage: str) -> None:
        if stage in self._loaded:  # the common case, without the lock
            return
        with self._lock:
            if stage in self._loaded or stage in self._loading:
                return
            self._loading.add(stage)
            try:
                if stage == "builtins":
                    for module in self.builtins:
                        importlib.import_module(module)
                else:
                    from importlib.metadata import entry_points

                    for ep in entry_points(group=self.group):
                        ep.load()
                self._loaded.add(stage)
            finally:
                self._loading.discard(stage)

    def load_entry_points(self) -> None:
        """Load the built-ins and every entry point of the group (once a process)."""
        self._load("builtins")
        self._load("entry points")

    def get(self, name: str) -> T | None:
        """The declaration of ``name``, or None: the built-ins first, then ``find``, then the
        entry points (scanned only for a name still unknown)."""
        self._load("builtins")
        found = self._items.get(name)
        if found is None and self._find is not None:
            with self._lock:
                found = self._items.get(name)
                if found is None:
                    found = self._find(name)
                    if found is not None:
                        self.register(name, found)
        if found is None:
            self.load_entry_points()
            found = self._items.get(name)
        return found

    def all(self) -> dict[str, T]:
        """Every declaration, by name, in order of registration (a copy)."""
        self.load_entry_points()
        with self._lock:
            return dict(self._items)

"""The one registry type: named things of one kind (fake providers, checks, integrations).

Each kind is declared in-process (``register``) or by another distribution through an entry-point
group, and killdrill's own are loaded by module name the first time the registry is read. Three
rules hold for all of them: a name declared again with a *different* declaration is refused
(two things under one name would be judged as one); the entry points are scanned only when a
name is not among those already known, or the whole registry is read (an agent that uses only
built-ins does not pay the ~40 ms scan); and a stage counts as loaded only once every import of
it is done, so another thread never reads a registry without its built-ins.

A plugin (an entry point of another distribution) is loaded in isolation, as pytest and pluggy
load theirs: one that raises on load (anything, not only ``ImportError``) or declares a name
already declared differently is reported in one line (a :class:`PluginWarning` naming it) and
skipped, and every other plugin and command works.  ``KILLDRILL_DISABLE_PLUGINS=1`` (as pytest's
``PYTEST_DISABLE_PLUGIN_AUTOLOAD``) loads no entry point at all.

Standard library and ``errors`` only: the agent reads the provider registry at start.
"""

from __future__ import annotations

import difflib
import importlib
import operator
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from killdrill.errors import UsageError

__all__ = ["DISABLE_PLUGINS_ENV", "PluginWarning", "Registry", "plugins_disabled"]

T = TypeVar("T")

DISABLE_PLUGINS_ENV = "KILLDRILL_DISABLE_PLUGINS"


class PluginWarning(UserWarning):
    """A plugin was skipped: it failed to load, or clashed with what is declared already."""


def plugins_disabled() -> bool:
    """``KILLDRILL_DISABLE_PLUGINS`` set (not empty, not ``0``): no entry point is loaded."""
    return os.environ.get(DISABLE_PLUGINS_ENV, "") not in ("", "0")


def plugin_failed(what: str, name: str, where: str, exc: BaseException) -> str:
    """The one line that says a plugin was skipped, and why."""
    said = str(exc).strip().splitlines()
    why = f"{type(exc).__name__}: {said[0]}" if said else type(exc).__name__
    return f"the {what} plugin {name!r} ({where}) is broken and was skipped: {why}"


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
    ``find``: a lookup of a name nobody registered (a module named after it, for integrations);
    ``module_of``: the module whose import declares a name nobody registered yet (a fault kind's,
    named by its grammar entry), imported here when the name is asked for."""

    def __init__(
        self,
        what: str,
        group: str,
        *,
        builtins: Sequence[str] = (),
        same: Callable[[T, T], bool] = operator.eq,
        find: Callable[[str], T | None] | None = None,
        module_of: Callable[[str], str | None] | None = None,
    ) -> None:
        self.what = what
        self.group = group
        self.builtins = tuple(builtins)
        self._same = same
        self._find = find
        self._module_of = module_of
        self._items: dict[str, T] = {}
        self._lock = threading.RLock()
        self._loaded: set[str] = set()  # the stages done: "builtins", "entry points"
        self._loading: set[str] = set()  # the stages this thread is importing now
        self.broken: dict[str, str] = {}  # plugins skipped: name -> the line that said why

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
                elif not plugins_disabled():
                    from importlib.metadata import entry_points

                    for ep in entry_points(group=self.group):
                        self._load_plugin(ep)
                self._loaded.add(stage)
            finally:
                self._loading.discard(stage)

    def _load_plugin(self, ep: Any) -> None:
        """Load one entry point; a plugin that fails is said once and skipped (what it registered
        before it failed stays out too)."""
        before = dict(self._items)
        try:
            ep.load()
        except Exception as exc:  # any failure of a plugin: said and skipped
            self._items = before
            self.broken[ep.name] = plugin_failed(self.what, ep.name, ep.value, exc)
            warnings.warn(PluginWarning(self.broken[ep.name]), stacklevel=2)

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
        module = self._module_of(name) if found is None and self._module_of is not None else None
        if module is not None:
            with self._lock:
                importlib.import_module(module)
                found = self._items.get(name)
        if found is None:
            self.load_entry_points()
            found = self._items.get(name)
        return found

    def all(self) -> dict[str, T]:
        """Every declaration, by name, in order of registration (a copy)."""
        self.load_entry_points()
        with self._lock:
            return dict(self._items)

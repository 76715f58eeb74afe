"""The import hook every integration uses: patch a framework's module as it is imported.

Integrations are activated at interpreter start (the bootstrap), before the agent imports its
framework, and must not import it themselves (seconds of imports, and a framework the agent may
never use). So each names the modules it patches, and :class:`PatchOnImport` runs the real
loader, then the integration's ``patch`` on the fresh module before anyone else sees it.
Standard library only.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from importlib.abc import Loader
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

__all__ = ["PatchOnImport"]


class _PatchingLoader(Loader):
    """Runs the real loader, then patches the module."""

    def __init__(self, loader: Loader, hook: PatchOnImport) -> None:
        self.loader = loader
        self.hook = hook

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader  # tracebacks and get_source use the real one
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.hook.patch(module)
        if self.hook.all_imported():
            self.hook.remove()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class PatchOnImport:
    """``patch(module)`` for each of ``targets`` (full module names): now for those already
    imported, at import for the others. ``patch`` must be idempotent."""

    def __init__(self, targets: Sequence[str], patch: Callable[[ModuleType], None]) -> None:
        self.targets = tuple(targets)
        self.patch = patch
        self._installed = False
        self._lock = threading.RLock()
        self.originals: dict[tuple[object, str], Any] = {}  # what ``replace`` replaced, for ``restore``
        self.undos: dict[str, Callable[[], None]] = {}  # a patch made as a whole (a module's) -> its undo

    def replace(self, owner: object, attr: str, value: Any) -> None:
        """Set ``owner.attr`` to ``value``, remembering the original the first time."""
        key = (owner, attr)
        if key not in self.originals:
            self.originals[key] = getattr(owner, attr)
        setattr(owner, attr, value)

    def restore(self) -> None:
        """Put back every original ``replace`` replaced (for in-process tests)."""
        for (owner, attr), value in self.originals.items():
            setattr(owner, attr, value)
        self.originals.clear()

    def all_imported(self) -> bool:
        return all(name in sys.modules for name in self.targets)

    def install(self) -> None:
        """Patch what is imported; hook the imports of the rest (idempotent)."""
        with self._lock:
            for name in self.targets:
                module = sys.modules.get(name)
                if module is not None:
                    self.patch(module)
            if not self.all_imported() and not self._installed:
                sys.meta_path.insert(0, self)  # a MetaPathFinder by protocol (find_spec)
                self._installed = True

    def remove(self) -> None:
        """Stop watching imports (modules already patched stay patched)."""
        with self._lock:
            if self._installed and self in sys.meta_path:
                sys.meta_path.remove(self)
            self._installed = False

    @property
    def waiting(self) -> bool:
        """True while some target is not imported yet and the hook watches for it."""
        return self._installed

    @property
    def active(self) -> bool:
        """True from :meth:`install` until :meth:`undo`: patched, or waiting for a target's import
        (an integration's ``active()``)."""
        return self._installed or bool(self.originals) or bool(self.undos)

    def undo(self) -> None:
        """Stop watching imports and put back everything patched: what ``replace`` replaced and
        each of ``undos`` (an integration's ``deactivate()``, for in-process tests)."""
        with self._lock:
            self.remove()
            self.restore()
            for undo in self.undos.values():
                undo()
            self.undos.clear()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self.targets:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, self)
                return spec
        return None

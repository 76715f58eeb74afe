"""What each fake provider is, declared once: its operations, how the verdict must count it.

The in-process fakes (``Fakes``), the HTTP fakes' ``/fakes/{provider}/{op}`` route and the verdict
all read this registry, so a new provider is one file: a ``killdrill.fakes.Provider`` subclass
(which declares and registers itself when its class is defined), or a bare :class:`ProviderSpec`
passed to :func:`register` for a provider the harness only judges (the model fake).  A package
outside killdrill can also expose providers through the entry point group ``killdrill.providers``
(loading the entry point registers them).

A provider nobody declared is judged as a plain non-idempotent effect: counted, never converged,
never skipped.  That default can only over-report (a duplicate of a convergent write), never hide
a duplicate.

Standard library only: the verdict sits below the fakes and must not import them; the built-in
fakes are loaded by name (:data:`BUILTIN_MODULES`) the first time the registry is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from killdrill.errors import UsageError
from killdrill.registry import Registry

__all__ = [
    "BUILTIN_MODULES",
    "ENTRY_POINT_GROUP",
    "ROWS",
    "Operation",
    "Param",
    "ProviderSpec",
    "load_entry_points",
    "register",
    "registered",
    "spec",
    "undo_operations",
]

ENTRY_POINT_GROUP = "killdrill.providers"
BUILTIN_MODULES = ("killdrill.fakes", "killdrill.fakes.model")
"""Modules whose import registers the built-in providers."""
ROWS = "db:"
"""The prefix of a provider that is a table of the agent's own database (``db:receipts``: its rows,
``--effect-table``): an undeclared provider, judged as a plain effect, whose calls are rows."""


@dataclass(frozen=True)
class Param:
    """One argument of an operation as a caller outside Python sends it (an MCP tool's input
    schema is the method's signature with these laid over it): its JSON type, whether it is
    required, its bounds.  ``type`` is a JSON Schema type name (``"integer"``, ``"string"``)."""

    name: str
    type: str
    required: bool = False
    minimum: int | None = None
    maximum: int | None = None
    max_length: int | None = None
    pattern: str | None = None

    def schema(self) -> dict[str, object]:
        """The JSON Schema of the argument (its type and bounds)."""
        declared = {
            "type": self.type,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "maxLength": self.max_length,
            "pattern": self.pattern,
        }
        return {k: v for k, v in declared.items() if v is not None}


@dataclass(frozen=True)
class Operation:
    """One operation of a provider.

    ``keyed``: it takes an idempotency key (over HTTP, the ``Idempotency-Key`` header fills it).
    ``read``: a lookup; neither recorded nor announced, so never an effect.
    ``undoes``/``target``: a compensation: it undoes the effect of the provider's op ``undoes``,
    named by the payload field ``target`` (what the ``compensation_order`` check reads).
    ``params``: the arguments' types and bounds a caller outside Python is held to (:class:`Param`).
    """

    name: str
    keyed: bool = False
    read: bool = False
    undoes: str | None = None
    target: str | None = None
    params: tuple[Param, ...] = ()

    def __post_init__(self) -> None:
        if (self.undoes is None) != (self.target is None):
            raise UsageError(f"operation {self.name!r}: give both undoes= and target=, or neither")


@dataclass(frozen=True)
class ProviderSpec:
    """A provider as the harness knows it.

    ``convergent``: repeating a call converges (an idempotent write such as ``kv.set``): judged on
    the final state, never counted as a duplicate.  ``call_only``: its calls are work, not effects
    (the model fake): never judged for exactly-once.
    """

    name: str
    operations: tuple[Operation, ...] = ()
    convergent: bool = False
    call_only: bool = False

    def operation(self, name: str) -> Operation | None:
        return next((o for o in self.operations if o.name == name), None)


_PROVIDERS: Registry[ProviderSpec] = Registry("provider", ENTRY_POINT_GROUP, builtins=BUILTIN_MODULES)


def register(provider: ProviderSpec) -> ProviderSpec:
    """Declare a provider.  Declaring the same name again with another declaration is refused
    (two providers under one name would be judged as one); the same declaration is a no-op."""
    return _PROVIDERS.register(provider.name, provider)


def load_entry_points() -> None:
    """Load the providers other packages declare (entry point group ``killdrill.providers``)."""
    _PROVIDERS.load_entry_points()


def registered() -> Mapping[str, ProviderSpec]:
    """Every declared provider, by name (a copy)."""
    return _PROVIDERS.all()


def spec(name: str) -> ProviderSpec:
    """The declaration of ``name``; an undeclared provider is a plain effect (see the docstring)."""
    return _PROVIDERS.get(name) or ProviderSpec(name)


def undo_operations() -> dict[tuple[str, str], tuple[tuple[str, str], str]]:
    """``(provider, undo op) -> ((provider, action op), payload field naming the action's effect)``."""
    return {
        (p.name, o.name): ((p.name, o.undoes), o.target)
        for p in registered().values()
        for o in p.operations
        if o.undoes is not None and o.target is not None
    }

"""The base of every fake provider, and its one declaration.

A fake is a :class:`Provider` subclass that names itself and lists its operations::

    class Bells(Provider):
        name = "bells"
        operations = (Operation("ring", keyed=True), Operation("count", read=True))

        def ring(self, idempotency_key=None, **payload):
            return self._invoke("ring", idempotency_key, payload, self._create("bell", payload))

Defining the class is the whole registration: the declaration goes to :mod:`killdrill.providers`
(what the verdict reads: convergent or not, which op undoes which), the class to the table
:class:`~killdrill.fakes.Fakes` builds its providers from (``fakes.bells``, ``fakes.provider("bells")``)
and the HTTP fakes serve (``POST /fakes/bells/ring``, the ``Idempotency-Key`` header filling the
key of a ``keyed`` operation).
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar, Protocol

from killdrill.fakes.processing import FAULT_SETTINGS, FakeRequest, Perform, check_fence
from killdrill.ledger import Ledger, Tx
from killdrill.providers import Operation, ProviderSpec, register
from killdrill.records import Call

__all__ = ["RESERVED_NAMES", "Provider", "fake_classes"]

RESERVED_NAMES = frozenset({"ledger", "thread", "attempt", "pid", "provider"})
"""Attributes of the ``Fakes`` handle a provider cannot be named after."""


class Host(Protocol):
    """What a provider needs of the handle that builds it (:class:`killdrill.fakes.Fakes`): its
    ledger, and the one way a call is run (atomic, then ``during:``, then the answer)."""

    ledger: Ledger

    def _run(self, request: FakeRequest) -> dict[str, Any]: ...


_CLASSES: dict[str, type[Provider]] = {}
_lock = threading.Lock()


def fake_classes() -> dict[str, type[Provider]]:
    """Every defined fake, by provider name, in order of definition (a copy)."""
    with _lock:
        return dict(_CLASSES)


class Provider:
    """Base of the fakes: records under the handle's thread and attempt, announces ``during:``."""

    name: ClassVar[str] = ""
    operations: ClassVar[tuple[Operation, ...]] = ()
    convergent: ClassVar[bool] = False
    """Repeating a call converges (an idempotent write): judged on the final state."""

    def __init_subclass__(cls, **kw: Any) -> None:
        """Declare and register the fake as soon as its class exists (only a class that names itself:
        a subclass that tweaks a fake keeps its parent's name and registration)."""
        super().__init_subclass__(**kw)
        if "name" not in cls.__dict__:
            return
        if not cls.name.isidentifier() or cls.name.startswith("_") or cls.name in RESERVED_NAMES:
            raise ValueError(
                f"fake provider name {cls.name!r}: an identifier, not one of {sorted(RESERVED_NAMES)}"
            )
        missing = [o.name for o in cls.operations if not callable(getattr(cls, o.name, None))]
        if missing:
            raise TypeError(f"{cls.__name__} declares operation(s) {missing} but has no such method")
        register(cls.spec())
        with _lock:
            known = _CLASSES.get(cls.name)
            if known is not None and known.__qualname__ != cls.__qualname__:
                raise ValueError(f"fake provider {cls.name!r} is already defined by {known.__qualname__}")
            _CLASSES[cls.name] = cls

    @classmethod
    def spec(cls) -> ProviderSpec:
        """What the harness knows of this provider (see :mod:`killdrill.providers`)."""
        return ProviderSpec(cls.name, tuple(cls.operations), convergent=cls.convergent)

    def __init__(self, fakes: Host) -> None:
        self.fakes = fakes

    @property
    def ledger(self) -> Ledger:
        return self.fakes.ledger

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Persist fault settings for this provider (see the module docstring); returns them all."""
        unknown = set(settings) - set(FAULT_SETTINGS)
        if unknown:
            raise TypeError(f"unknown fault setting(s) {sorted(unknown)}; expected {FAULT_SETTINGS}")
        return self.ledger.configure(self.name, **settings)

    def calls(self, op: str | None = None) -> list[Call]:
        """This provider's recorded calls, in order."""
        return self.ledger.calls(self.name, op)

    def fence(self, resource: str, token: int) -> int:
        """Present a new lease holder's fencing token before it writes (Kafka's producer-epoch
        bump, a ZooKeeper/etcd compare-and-set): from now on a lower token is refused.  Returns
        the highest token that had already *written* to ``resource`` (0: none), so the new holder
        can tell that its predecessor's write landed.  Not a call of the effect: not recorded."""
        with self.ledger.transaction() as tx:
            wrote = int((tx.settings(f"{self.name}.fences").get(resource) or {}).get("wrote", 0))
            refused = check_fence(tx, self.name, (resource, token), write=False)
        if refused is not None:
            raise refused
        return wrote

    def _invoke(
        self,
        op: str,
        key: str | None,
        payload: dict[str, Any],
        perform: Perform,
        fence: tuple[str, int] | None = None,
    ) -> dict[str, Any]:
        """Make one request of this provider, served however the handle serves it."""
        return self.fakes._run(FakeRequest(self.name, op, key, payload, perform, fence=fence))

    def _create(self, prefix: str, data: dict[str, Any], ref: str | None = None) -> Perform:
        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            effect_id = tx.next_id(prefix)
            result = {**data, "id": effect_id}
            tx.put_effect(self.name, effect_id, result, ref=ref)
            return effect_id, result

        return perform

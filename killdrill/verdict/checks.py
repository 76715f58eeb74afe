"""Checks, and how :func:`judge` composes them (the way Jepsen's checkers compose).

A check is one function registered with :func:`check`.  Two shapes:

- ``per_effect=True``: ``fn(ctx, effect) -> violations`` runs for each logical effect (case and
  baseline together, in order of first appearance): the count checks, ``key_changed``;
- otherwise ``fn(ctx) -> violations`` runs once on the whole case: ``key_reused``,
  ``state_diverged``, ``stuck_in_flight``, ``compensation_order``.

Core checks always run; an ``opt_in`` check runs when named in ``judge(checks=...)``
(``DrillOptions.checks``, ``--check NAME``).  A new check is one function in one file::

    @check("refund_without_charge", opt_in=True)
    def refund_without_charge(ctx: CheckContext) -> list[Violation]: ...

Checks in another distribution register through the entry point group ``killdrill.checks``
(loading the entry point runs the decorator).  Names are violation kinds: stable, in JSON and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from killdrill.alloc import without_gc
from killdrill.errors import UsageError
from killdrill.records import Attempt, Call, LedgerSnapshot, Violation
from killdrill.registry import Registry
from killdrill.verdict.grouping import EffectKey, unknown_calls
from killdrill.verdict.index import NAMED_BY_PAYLOAD, EffectNaming, grouping
from killdrill.verdict.phrases import calls_detail, format_identity

__all__ = [
    "ENTRY_POINT_GROUP",
    "OPT_IN_CHECKS",
    "Check",
    "CheckContext",
    "Effect",
    "check",
    "judge",
    "registered_checks",
]

ENTRY_POINT_GROUP = "killdrill.checks"


@dataclass(frozen=True, init=False)
class Effect:
    """One logical effect: its calls in the case and in the baseline (each in ledger order)."""

    key: EffectKey
    identity: dict[str, Any]
    calls: tuple[Call, ...]
    baseline: tuple[Call, ...]

    def __init__(
        self, key: EffectKey, identity: dict[str, Any], calls: tuple[Call, ...], baseline: tuple[Call, ...]
    ) -> None:
        # frozen, but built once per effect of a case (10^5 of them): one dict update
        # instead of the generated __init__'s four object.__setattr__ calls (5x faster)
        self.__dict__.update(key=key, identity=identity, calls=calls, baseline=baseline)

    @property
    def plain(self) -> bool:
        """One call in the case and one in the baseline, under the same key, landed alike: the
        common effect of a big batch, on which no core per-effect check can report anything."""
        calls, base = self.calls, self.baseline
        if len(calls) != 1 or len(base) != 1:
            return False
        a, b = calls[0], base[0]
        return a.key == b.key and a.landed == b.landed

    @property
    def provider(self) -> str:
        return self.key[0]

    @property
    def op(self) -> str:
        return self.key[1]

    @property
    def name(self) -> str:
        """``payments.charge {account_id: acme, amount: 4200}``: how messages name it."""
        return f"{self.provider}.{self.op} {format_identity(self.identity)}"

    @cached_property
    def landed(self) -> list[Call]:  # cached: every count check asks; do not mutate
        return [c for c in self.calls if c.landed]

    @cached_property
    def baseline_landed(self) -> int:
        return sum(c.landed for c in self.baseline)


@dataclass
class CheckContext:
    """What every check sees: both ledgers, the attempts, the effects, and which responses were lost."""

    baseline: LedgerSnapshot
    case: LedgerSnapshot
    attempts: Sequence[Attempt]
    naming: EffectNaming
    effects: list[Effect] = field(default_factory=list)
    unknown: dict[int, str] = field(default_factory=dict)  # seq -> the point that cut its response
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # verdict.lookups' indexes

    @classmethod
    def build(
        cls,
        baseline: LedgerSnapshot,
        case: LedgerSnapshot,
        attempts: Sequence[Attempt],
        naming: EffectNaming = NAMED_BY_PAYLOAD,
    ) -> CheckContext:
        b = grouping(baseline.calls, naming)
        m = grouping(case.calls, naming)
        base, mine = b.groups, m.groups
        effects = []  # the case's effects in order, then the baseline's it lacks
        for key, calls in mine.items():
            effects.append(Effect(key, dict(m.identities[key]), tuple(calls), tuple(base.get(key, ()))))
        for key, calls in base.items():
            if key not in mine:
                effects.append(Effect(key, dict(b.identities[key]), (), tuple(calls)))
        return cls(baseline, case, attempts, naming, effects, unknown_calls(case.calls, attempts))

    @property
    def identity(self) -> Mapping[str, Sequence[str]]:
        """The configured identity fields (``naming.identity``; what checks written before read)."""
        return self.naming.identity

    @property
    def volatile(self) -> Mapping[str, Sequence[str]]:
        """The volatile fields of the clean runs (``naming.volatile``)."""
        return self.naming.volatile

    def detail(self, effect: Effect) -> dict[str, Any]:
        """The evidence every per-effect violation carries."""
        calls = effect.calls
        return {
            "landed": len(effect.landed),
            "baseline": effect.baseline_landed,
            "keys": [c.key for c in calls],
            "attempts": sorted({c.attempt for c in calls}),
            "calls": calls_detail(calls, self.unknown),
        }

    def violation(self, kind: str, message: str, effect: Effect, **extra: Any) -> Violation:
        """A violation about ``effect``, with its calls and the standard evidence (plus ``extra``)."""
        return Violation(
            kind=kind,
            message=message,
            provider=effect.provider,
            op=effect.op,
            identity=effect.identity,
            calls=effect.calls,
            detail={**self.detail(effect), **extra},
        )


F = TypeVar("F", bound=Callable[..., Iterable[Violation]])


@dataclass(frozen=True)
class Check:
    name: str
    fn: Callable[..., Iterable[Violation]]
    per_effect: bool = False
    opt_in: bool = False
    doc: str = ""
    quiet_on_plain: bool = False
    """A per-effect check that never reports a :attr:`Effect.plain` effect: :func:`judge` skips it
    there (at 10^5 effects the calls were most of the verdict; core checks only, each proven by a
    test that it returns nothing on plain effects)."""


_CHECKS: Registry[Check] = Registry(
    "check", ENTRY_POINT_GROUP, same=lambda a, b: a.fn.__qualname__ == b.fn.__qualname__
)


def check(
    name: str, *, per_effect: bool = False, opt_in: bool = False, quiet_on_plain: bool = False
) -> Callable[[F], F]:
    """Register ``fn`` as the check ``name`` (also the kind of the violations it reports);
    ``quiet_on_plain``: see :attr:`Check.quiet_on_plain`."""

    def register(fn: F) -> F:
        doc = (fn.__doc__ or "").strip().split("\n")[0]
        _CHECKS.register(name, Check(name, fn, per_effect, opt_in, doc, quiet_on_plain and per_effect))
        return fn

    return register


def registered_checks() -> dict[str, Check]:
    """Every registered check, core and opt-in, in order of registration (a copy)."""
    return _CHECKS.all()


class _OptIn(Mapping[str, Check]):
    """The opt-in checks, read live (a check registered later is in it)."""

    def _now(self) -> dict[str, Check]:
        return {n: c for n, c in registered_checks().items() if c.opt_in}

    def __getitem__(self, name: str) -> Check:
        return self._now()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._now())

    def __repr__(self) -> str:
        return f"OPT_IN_CHECKS({', '.join(self)})"


OPT_IN_CHECKS: Mapping[str, Check] = _OptIn()
"""Opt-in checks beyond the core ones, by name (``DrillOptions(checks=...)``, ``--check``)."""


@without_gc  # 10^5 effects: the collector's passes were half the verdict
def judge(
    baseline: LedgerSnapshot,
    case: LedgerSnapshot,
    attempts: Sequence[Attempt],
    *,
    naming: EffectNaming = NAMED_BY_PAYLOAD,
    checks: Sequence[str] = (),
) -> list[Violation]:
    """Every way the case's effects differ from the baseline's, as stable-kind violations.

    Runs the core checks and the opt-in ones named in ``checks`` (an unknown name is a
    :class:`~killdrill.errors.UsageError`).  Order: per logical effect in order of first
    appearance (its per-effect checks in registration order: counts, then ``key_changed``), then
    the whole-case checks in registration order (``key_reused``, ``state_diverged``,
    ``stuck_in_flight``, then opt-in ones).
    """
    registry = registered_checks()
    unknown = [n for n in checks if n not in registry]
    if unknown:
        opt = ", ".join(n for n, c in registry.items() if c.opt_in)
        raise UsageError(f"unknown check {unknown[0]!r}: expected one of {opt}")
    # core checks in registration order, then the opt-in ones in the order they were asked for
    active = [c for c in registry.values() if not c.opt_in]
    active += [registry[n] for n in dict.fromkeys(checks) if registry[n].opt_in]
    ctx = CheckContext.build(baseline, case, attempts, naming)
    out: list[Violation] = []
    per_effect = [c.fn for c in active if c.per_effect]
    on_plain = [c.fn for c in active if c.per_effect and not c.quiet_on_plain]
    for effect in ctx.effects:
        for fn in on_plain if effect.plain else per_effect:
            out.extend(fn(ctx, effect))
    for c in active:
        if not c.per_effect:
            out.extend(c.fn(ctx))
    return out

"""The oracle: a case's ledger against the baseline ledger, per logical effect.

Delivery cannot be exactly-once, so the verdict never counts calls: it counts *effects*.
A logical effect is ``(provider, op, identity)``; the identity is the canonical payload
without the fields that legitimately vary between two clean runs (a model's wording, a
timestamp: found by matching the two runs' calls by content, never by ledger order, see
:mod:`killdrill.verdict.matching`), or the fields a user pins per op (``{"payments.charge": ["account_id",
"billing_cycle"]}``).  An effect "landed" when a call's outcome is ``created``; replays,
rejections and conflicts are evidence about keys, not effects.

Calls are modelled as Jepsen does: a call whose attempt was killed at ``during:PROVIDER.OP``
right after it is *unknown* to the caller (the provider did it, the caller never heard).
Such a call is fine as long as the effect still lands exactly once in the end; the report
marks it ("response lost") because that is where a retry with a fresh key goes wrong.

Modules: ``grouping`` (identities, grouping, volatile fields, unknown calls, the summary),
``registry`` (checks and :func:`judge`, which composes them), ``core`` (the core checks),
``compensation`` (opt-in ``compensation_order``), ``phrases`` (how messages say things).
A new check is one registered function: see :mod:`killdrill.verdict.checks`.

Layer: beside process, fakes and audit; may import ``providers``, ``records``, ``points``,
``canonical`` and ``errors``. Its helpers live here too: ``matching`` (which calls are the same
effect), ``baselines``, ``value_diff``, ``model_work``.
"""

from __future__ import annotations

from killdrill.verdict import compensation, core  # noqa: F401  (registers the built-in checks)
from killdrill.verdict.checks import (
    OPT_IN_CHECKS,
    Check,
    CheckContext,
    Effect,
    check,
    judge,
    registered_checks,
)
from killdrill.verdict.compensation import compensation_order
from killdrill.verdict.grouping import (
    STATE_VOLATILE,
    EffectKey,
    effect_calls,
    effect_identity,
    effect_key,
    group_effects,
    is_convergent,
    summarize,
    unknown_calls,
    volatile_fields,
)
from killdrill.verdict.index import NAMED_BY_PAYLOAD, EffectNaming
from killdrill.verdict.matching import canonical  # one canonical form for the verdict and the matching
from killdrill.verdict.phrases import format_identity

__all__ = [
    "NAMED_BY_PAYLOAD",
    "OPT_IN_CHECKS",
    "STATE_VOLATILE",
    "Check",
    "CheckContext",
    "Effect",
    "EffectKey",
    "EffectNaming",
    "canonical",
    "check",
    "compensation_order",
    "effect_calls",
    "effect_identity",
    "effect_key",
    "format_identity",
    "group_effects",
    "is_convergent",
    "judge",
    "registered_checks",
    "summarize",
    "unknown_calls",
    "volatile_fields",
]

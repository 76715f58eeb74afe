"""The diagnosis: each violation's cause (a stable name and what was observed) and its fix.

Drawn only from what the drill observed: the attempts' outcomes and where their kills landed,
whether a call's response was lost (``during:``), the keys' origin across the calls of an effect
(the same in every attempt, new per attempt, new per call, the stripe SDK's automatic key, none),
the provider's class (keyed, convergent, irreversible), and the integration's view of the
thread when an attempt exited 0 (``Attempt.unfinished``).  Where the cause is not known, the
cause name says so (``not_called``, ``unexplained``) and ``observed`` says what is known.

Consequences (:mod:`killdrill.verdict.consequences`) nest under their root.

Docs: ARCHITECTURE.md ("Stable names"), README ("Verdicts").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from killdrill.integrations import framework_cause
from killdrill.providers import spec
from killdrill.records import (
    COMPENSATION_ORDER,
    CONFLICT,
    DUPLICATE_EFFECT,
    FAILED,
    HANG,
    HARNESS_ERROR,
    KEY_CHANGED,
    KEY_REUSED,
    MISSING_EFFECT,
    POINT_NOT_REACHED,
    REJECTED,
    RESUME_FAILED,
    STATE_DIVERGED,
    STUCK_IN_FLIGHT,
    UNEXPECTED_EFFECT,
    Attempt,
    Call,
    LedgerSnapshot,
    Violation,
)
from killdrill.verdict.causes import FIXES, CauseName
from killdrill.verdict.consequences import roots_and_consequences
from killdrill.verdict.model_ids import issued_ids, model_id_story
from killdrill.verdict.phrases import format_identity, is_row
from killdrill.verdict.power_loss import power_loss_cause
from killdrill.verdict.resubmission import resubmitted_story
from killdrill.verdict.runtime_keys import runtime_attempt_in_key

__all__ = ["FIXES", "CauseName", "diagnose", "key_origin"]


_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", re.I)
_BARE_UUID = re.compile(rf"^{_UUID}$", re.I)
_CLOCK = re.compile(r"(?<!\d)1[5-9]\d{8}(?:\d{3}|\d{6}|\d{9})?(?!\d)")  # epoch s/ms/us/ns, 2017..2033
_TOOL_CALL = re.compile(r"^(call_|toolu_)")


def key_shape(key: str) -> str | None:
    """What a key looks like it was made from, when its shape says so (None: nothing to say)."""
    if _BARE_UUID.match(key) and not _UUID4.fullmatch(key):
        return "sdk"  # the stripe SDK's automatic key: 16 random bytes in UUID shape, no version bits
    if key.startswith("stripe-node-retry-"):
        return "sdk"
    if _UUID4.search(key):
        return "a uuid4"
    if _CLOCK.search(key):
        return "the clock"
    if _TOOL_CALL.match(key):
        return "a model's tool-call id"
    return None


def key_origin(calls: Sequence[Call]) -> str:
    """How the keys of one effect's calls relate: ``same`` (one key in every attempt), ``none``,
    ``dropped`` (with and without), ``per_call`` (changed within one attempt), ``per_attempt``,
    ``sdk`` (the stripe SDK's automatic key)."""
    keys = [c.key for c in calls]
    if all(k is None for k in keys):
        return "none"
    if any(k is None for k in keys):
        return "dropped"
    if len(set(keys)) == 1:
        return "same"
    if any(key_shape(k) == "sdk" for k in keys if k is not None):
        return "sdk"
    by_attempt: dict[int, set[str]] = {}
    for c in calls:
        by_attempt.setdefault(c.attempt, set()).add(str(c.key))
    if any(len(ks) > 1 for ks in by_attempt.values()):
        return "per_call"
    return "per_attempt"


def _attempts_phrase(numbers: Iterable[int]) -> str:
    ns = sorted(set(numbers))
    if len(ns) == 1:
        return f"attempt {ns[0]}"
    return "attempts " + ", ".join(str(n) for n in ns[:-1]) + f" and {ns[-1]}"


def _restarted_at(a: Attempt) -> list[str]:
    """The dependencies a ``restart=`` killed when ``a`` reached its trigger (``a`` itself went on):
    an integration's service it records, or the ``--serve`` service its fault names."""
    head = (a.kill or "").split(":", 1)[0]
    served = [head.split("=", 1)[1]] if head.startswith("restart=") and not a.killed_at else []
    return [*a.restarted, *(name for name in served if name not in a.restarted)]


def _lost_phrase(v: Violation, attempts: Sequence[Attempt] = ()) -> str:
    """How the first landed call's caller lost track of it: the response lost, a dependency its
    attempt restarted (``Attempt.restarted``), or a kill before the checkpoint recorded it."""
    calls = v.detail.get("calls") or []
    lost = [c for c in calls if isinstance(c, Mapping) and c.get("response_lost")]
    if lost:
        c = lost[0]
        return (
            f"attempt {c['attempt']}'s call landed but its response was lost (killed at {c['response_lost']})"
        )
    landed = [c for c in v.calls if c.landed]
    if not landed:
        return ""
    first = landed[0].attempt
    gone = [name for a in attempts if a.number == first for name in _restarted_at(a)]
    if gone:
        return f"attempt {first}'s call landed, then its dependency {', '.join(gone)} was restarted under it"
    return f"attempt {first}'s call landed before its kill"


def _irreversible(provider: str) -> bool:
    """No operation takes a key, and a ``lookup`` read reconciles: the irreversible class (mailbox)."""
    ops = spec(provider).operations
    return bool(ops) and not any(o.keyed for o in ops) and any(o.read and o.name == "lookup" for o in ops)


def _restarted_under(attempts: Sequence[Attempt]) -> str:
    """What a dependency killed under the run (the target of a ``KIND=TARGET:TRIGGER`` fault, a
    ``restart=``: a ``--serve`` service's killed attempt, or an integration's service the
    trigger's attempt names) may have taken with it, said after a run that never completed."""
    gone = []
    for a in attempts:
        head = (a.kill or "").split(":", 1)[0]
        if a.killed_at and "=" in head and head.split("=", 1)[1] == (a.process or "").split("[", 1)[0]:
            gone.append(f"{a.process} (attempt {a.number}, {a.kill})")
        gone += [f"{name} ({a.kill}, reached by attempt {a.number})" for name in a.restarted]
    if not gone:
        return ""
    return (
        f"; the run's dependency {', '.join(gone)} was killed and restarted under it: what it held and"
        " had not made durable (a queued or unacknowledged message, a result not yet stored, a"
        " transaction in flight) went with it, and the run waited for it"
    )


# A connection fault that loses the answer to a commit the server applied: ``drop:NAME.commit``, or
# every connection of a proxy closed or reset at ``during:NAME.commit`` (``.exec``: Redis).
_ANSWER_LOST = re.compile(
    r"^(?:drop:|(?:cut|rst)=[^:]+:(?:[^:]+:)?during:)[^:]+\.(?:commit|exec)(?:#\d+)?(?:~.*)?$"
)


def _loses_commit_answer(kill: str) -> bool:
    return bool(_ANSWER_LOST.match(kill))


def _row_again(calls: Sequence[Call], attempts: Sequence[Attempt]) -> str:
    """Who inserted a row again: a later attempt, or the same one retrying (after a connection
    fault that lost the answer to a commit that landed: ``drop:``)."""
    writers = {c.attempt for c in calls if c.landed}
    if len(writers) != 1 or 0 in writers:
        return "a later attempt inserted the row again instead of finding the one an earlier attempt wrote"
    (number,) = writers
    kill = next((a.kill for a in attempts if a.number == number), None) or ""
    lost = f" after {kill} lost the answer to a commit that landed" if _loses_commit_answer(kill) else ""
    return (
        f"attempt {number} inserted the row again on a retry{lost}, instead of checking whether its"
        " first write had landed"
    )


def _key_cause(v: Violation, attempts: Sequence[Attempt]) -> tuple[CauseName, str] | None:
    """The key story of one effect's calls, for ``duplicate_effect`` and ``key_changed``."""
    calls = list(v.calls)
    if not calls:
        return None
    provider, op = v.provider or "", v.op or ""
    if is_row(calls[0]):  # the agent's own table: a second row for one identity
        n = len([c for c in calls if c.landed])
        known = all(c.attempt for c in calls)  # 0: a deployment's, whose processes run at once
        by = f" (written by {_attempts_phrase(c.attempt for c in calls)})" if known else ""
        return (
            CauseName.ROW_NOT_UNIQUE,
            f"{provider} has {n} rows for {format_identity(v.identity)}{by}: " + _row_again(calls, attempts),
        )
    declared = spec(provider)
    operation = declared.operation(op)
    # An undeclared provider (the MCP proxy's NAME) takes a key when its calls carry one (--key
    # TOOL=ARG); killdrill knows nothing else of it, so no cause says it takes none.
    unknown = not declared.operations
    keyed = bool(operation and operation.keyed) or (unknown and any(c.key is not None for c in calls))
    origin = key_origin(calls)
    lost = _lost_phrase(v, attempts)
    resent = f"; {lost}, and the effect was sent again" if lost else ""
    name = f"{provider}.{op}"
    if origin == "none":
        if keyed or unknown:  # an undeclared provider may well take a key: never say it takes none
            return (
                CauseName.NO_KEY,
                f"{name} was sent without an idempotency key in "
                f"{_attempts_phrase(c.attempt for c in calls)}{resent}",
            )
        if _irreversible(provider):
            return (
                CauseName.IRREVERSIBLE_RESENT,
                f"{name} is irreversible (no key can dedupe it) and was sent by "
                f"{_attempts_phrase(c.attempt for c in v.calls if c.landed)}{resent}",
            )
        return (
            CauseName.UNKEYED_RESENT,
            f"{name} takes no idempotency key and was called by "
            f"{_attempts_phrase(c.attempt for c in v.calls if c.landed)}{resent}",
        )
    if origin == "dropped":
        without = _attempts_phrase(c.attempt for c in calls if c.key is None)
        return (
            CauseName.KEY_DROPPED,
            f"{name} was sent without its key in {without} and with it elsewhere{resent}",
        )
    numbered = runtime_attempt_in_key(calls)
    if numbered:
        return CauseName.KEY_NEW_PER_ATTEMPT, f"{name}: {numbered}{resent}"
    shapes = sorted({s for c in calls if c.key and (s := key_shape(c.key)) and s != "sdk"})
    made = f" (the keys look made from {' and '.join(shapes)})" if shapes else ""
    n = len({c.key for c in calls})
    if origin == "sdk":
        return (
            CauseName.SDK_GENERATED_KEY,
            f"{name}'s {n} keys have the shape of the stripe SDK's automatic Idempotency-Key (16 random "
            f"bytes, new in every process: {calls[0].key}){resent}",
        )
    if origin == "per_call":
        return (
            CauseName.KEY_NEW_PER_CALL,
            f"{name} got a new key on a retry within one attempt ({n} keys){made}{resent}",
        )
    if origin == "per_attempt":
        return (
            CauseName.KEY_NEW_PER_ATTEMPT,
            f"{name} got a new key in every attempt ({n} keys over "
            f"{_attempts_phrase(c.attempt for c in calls)}){made}{resent}",
        )
    # one key, landed more than once
    if not keyed:
        if _irreversible(provider):
            return (
                CauseName.IRREVERSIBLE_RESENT,
                f"{name} is irreversible: its ref {calls[0].key} is not a key the provider dedupes by; "
                f"sent by {_attempts_phrase(c.attempt for c in v.calls if c.landed)}{resent}",
            )
        return (
            CauseName.UNKEYED_RESENT,
            f"{name} takes no idempotency key; landed {len([c for c in calls if c.landed])} times{resent}",
        )
    return (
        CauseName.PROVIDER_NOT_DEDUPING,
        f"{name} landed {len([c for c in calls if c.landed])} times under the one key {calls[0].key}",
    )


_KEYED = (DUPLICATE_EFFECT, KEY_CHANGED)
_RESUBMITTABLE = (*_KEYED, UNEXPECTED_EFFECT, STATE_DIVERGED)


def _last_unfinished(attempts: Sequence[Attempt]) -> Attempt | None:
    last = attempts[-1] if attempts else None
    return last if last is not None and last.unfinished else None


def _killed_story(attempts: Sequence[Attempt]) -> str:
    killed = [a for a in attempts if a.killed_at]
    ended = attempts[-1] if attempts else None
    parts = [f"attempt {a.number} was killed at {a.killed_at}" for a in killed[:2]]
    if ended is not None and ended.returncode is not None:
        parts.append(f"attempt {ended.number} exited rc {ended.returncode}")
    return ", ".join(parts)


def _diagnose_one(
    v: Violation, attempts: Sequence[Attempt], stopped: Violation | None
) -> tuple[CauseName, str]:
    kind = v.kind
    if kind in (DUPLICATE_EFFECT, KEY_CHANGED):
        found = _key_cause(v, attempts)
        if found is not None:
            return found
    if kind == KEY_REUSED:
        differs = list(v.detail.get("differs", ()))
        ident = v.identity or {}
        named = [f for f in differs if f in ident and f != "op"]
        if v.detail.get("refused") or v.detail.get("volatile") or not named:
            return (
                CauseName.PAYLOAD_RECOMPUTED,
                f"key {v.detail.get('key')} was sent again with another {', '.join(differs)} "
                f"({_attempts_phrase(v.detail.get('attempts', ()))}): the payload was recomputed on replay",
            )
        return (
            CauseName.KEY_SHARED_BY_EFFECTS,
            f"key {v.detail.get('key')} named {len(v.detail.get('effects', ()))} different effects "
            f"(they differ in {', '.join(named)})",
        )
    if kind == MISSING_EFFECT:
        unfinished = _last_unfinished(attempts)
        if not v.calls and unfinished is not None:
            return (
                CauseName.UNFINISHED_RESUME,
                f"attempt {unfinished.number} exited 0 with the thread unfinished: the checkpointer still "
                f"holds pending tasks ({', '.join(unfinished.unfinished)})"
                + "".join(
                    f"; attempt {a.number} was killed at {a.killed_at}" for a in attempts if a.killed_at
                ),
            )
        if stopped is not None:
            return (
                CauseName.RUN_NOT_COMPLETED,
                f"the run did not complete ({stopped.kind}): {stopped.message}",
            )
        refused = [c for c in v.calls if c.outcome in (REJECTED, CONFLICT, FAILED)]
        if refused:
            c = refused[-1]
            return (
                CauseName.CALL_REFUSED,
                f"attempt {c.attempt}'s call was {c.outcome} and not retried to a landing",
            )
        if not v.calls:
            return CauseName.NOT_CALLED, f"no attempt called it: {_killed_story(attempts)} without calling it"
        return CauseName.UNEXPLAINED, "it was called but landed fewer times than in the baseline"
    if kind == UNEXPECTED_EFFECT:
        return CauseName.UNEXPLAINED, "no clean run made this effect; see how it differs from the baseline's"
    if kind == STATE_DIVERGED:
        writers = sorted({c.attempt for c in v.calls})
        if len(writers) > 1:
            return (
                CauseName.NON_CONVERGENT_WRITE,
                f"kv {v.detail.get('key')!r} was written by {_attempts_phrase(writers)} and ended elsewhere "
                "than the baseline: the write does not converge when repeated",
            )
        return CauseName.UNEXPLAINED, f"kv {v.detail.get('key')!r} ended elsewhere than the baseline"
    if kind == STUCK_IN_FLIGHT:
        return (
            CauseName.KEY_ABANDONED,
            f"key {v.detail.get('key')} was claimed by attempt {v.detail.get('attempt')} and no later call "
            "with it completed",
        )
    if kind == COMPENSATION_ORDER:
        return CauseName.COMPENSATION_OUT_OF_ORDER, v.message
    if kind == RESUME_FAILED:
        if stopped is not None and stopped.kind == KEY_REUSED:  # the provider refused the replay
            return (
                CauseName.PAYLOAD_RECOMPUTED,
                f"the provider refused key {stopped.detail.get('key')} sent again with another payload "
                f"(differs in {', '.join(stopped.detail.get('differs', ()))}), so the run could not finish",
            )
        if v.detail.get("attempt_limit") is not None:
            return CauseName.ATTEMPT_LIMIT, v.message
        gone = _restarted_under(attempts)
        return (CauseName.DEPENDENCY_RESTARTED if gone else CauseName.RESUME_CRASHED), v.message + gone
    if kind == HANG:
        gone = _restarted_under(attempts)
        return (CauseName.DEPENDENCY_RESTARTED if gone else CauseName.HANG), v.message + gone
    if kind == POINT_NOT_REACHED:
        return CauseName.POINT_NOT_REACHED, v.message
    if kind == HARNESS_ERROR:
        return CauseName.HARNESS, v.message
    return CauseName.UNEXPLAINED, "the drill has no more to say than the message"


# ---------------------------------------------------------------- entry points


def _framework_cause(v: Violation, attempts: Sequence[Attempt], integrations: Sequence[str]) -> Violation:
    """``v`` as the case's integrations explain it (their record's ``causes`` hook, first one that
    answers), or as it is."""
    found = framework_cause(integrations, v, attempts)
    return v if found is None else replace(v, cause=found.name, observed=found.observed, fix=found.fix)


def diagnose(
    violations: Sequence[Violation],
    *,
    baseline: LedgerSnapshot,
    attempts: Sequence[Attempt],
    integrations: Sequence[str] = (),
    ledger: LedgerSnapshot | None = None,
) -> list[Violation]:
    """``violations`` with a cause, what was observed, and a fix each (the integrations the case
    ran under may name a framework-specific one; ``ledger``: the case's, for the ids its model
    issued); consequences nested under their root.  Idempotent: a violation that has a cause
    keeps it."""
    issued = issued_ids(ledger)
    refused = next(
        (v for v in violations if v.kind == KEY_REUSED and any(c.outcome == REJECTED for c in v.calls)), None
    )
    stopped = refused or next((v for v in violations if v.kind in (RESUME_FAILED, HANG, HARNESS_ERROR)), None)
    out = []
    for v in violations:
        if v.cause is None:
            story = model_id_story(v.calls, issued, f"{v.provider}.{v.op}") if v.kind in _KEYED else None
            again = resubmitted_story(v, attempts, ledger, baseline) if v.kind in _RESUBMITTABLE else None
            if story is not None:
                cause, observed = CauseName.MODEL_ID_KEY, story
            elif again is not None:
                cause, observed = CauseName.WORK_RESUBMITTED, again
            else:
                cause, observed = _diagnose_one(v, attempts, stopped if stopped is not v else None)
            v = replace(v, cause=str(cause), observed=observed, fix=FIXES[cause])
            lost = power_loss_cause(v, attempts, str(cause))
            if lost is not None:  # the resume ran on what a power loss left
                v = replace(
                    v, cause=str(CauseName.UNSYNCED_WRITE), observed=f"{lost[0]}; {observed}", fix=lost[1]
                )
            v = _framework_cause(v, attempts, integrations)
        out.append(v)
    return roots_and_consequences(out, baseline)

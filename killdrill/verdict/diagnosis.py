"""The diagnosis: each violation's cause (a stable name and what was observed) and its fix.

Drawn only from what the drill observed: the attempts' outcomes and where their kills landed,
whether a call's response was lost (``during:``), the keys' origin across the calls of an effect
(the same in every attempt, new per attempt, new per call, the stripe SDK's automatic key, none),
the provider's class (keyed, convergent, irreversible), and the integration's view of the
thread when an attempt exited 0 (``Attempt.unfinished``).  Where the cause is not known, the
cause name says so (``not_called``, ``unexplained``) and ``observed`` says what is known.

Consequences: a missing or unexpected effect (or a diverged kv value) whose only difference
from the baseline is a value another violated effect produced (the charge id in a webhook body)
is moved under that violation's ``consequences``: one bug, one root.

Docs: ARCHITECTURE.md ("Stable names"), README ("Verdicts").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

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
    StableName,
    Violation,
)
from killdrill.verdict.matching import canonical
from killdrill.verdict.model_ids import issued_ids, model_id_story

__all__ = ["FIXES", "Cause", "diagnose", "key_origin", "regroup_summary", "roots_and_consequences"]


class Cause(StableName):
    """Why a violation happened, as far as the drill saw (docs: ARCHITECTURE.md, "Stable names")."""

    NO_KEY = "no_key"
    KEY_DROPPED = "key_dropped"
    KEY_NEW_PER_ATTEMPT = "key_new_per_attempt"
    KEY_NEW_PER_CALL = "key_new_per_call"
    SDK_GENERATED_KEY = "sdk_generated_key"
    MODEL_ID_KEY = "model_id_key"
    IRREVERSIBLE_RESENT = "irreversible_resent"
    UNKEYED_RESENT = "unkeyed_resent"
    PROVIDER_NOT_DEDUPING = "provider_not_deduping"
    KEY_SHARED_BY_EFFECTS = "key_shared_by_effects"
    PAYLOAD_RECOMPUTED = "payload_recomputed"
    UNFINISHED_RESUME = "unfinished_resume"
    RUN_NOT_COMPLETED = "run_not_completed"
    CALL_REFUSED = "call_refused"
    NOT_CALLED = "not_called"
    NON_CONVERGENT_WRITE = "non_convergent_write"
    KEY_ABANDONED = "key_abandoned"
    COMPENSATION_OUT_OF_ORDER = "compensation_out_of_order"
    CONSEQUENCE = "consequence"
    RESUME_CRASHED = "resume_crashed"
    HANG = "hang"
    POINT_NOT_REACHED = "point_not_reached"
    HARNESS = "harness_error"
    UNEXPLAINED = "unexplained"


_KEY_FIX = (
    "derive the key from what the action is (thread, step, business ids: "
    "killdrill.effects.idempotency_key(...)), or generate it once and checkpoint it before the call, "
    "and send that same key on every retry and resume"
)
FIXES: dict[Cause, str] = {
    Cause.NO_KEY: "send an idempotency key with every call of this effect: " + _KEY_FIX,
    Cause.KEY_DROPPED: "send the key on every call of the effect, retries and resumes included: " + _KEY_FIX,
    Cause.KEY_NEW_PER_ATTEMPT: "never build the key from uuid4, the clock, a model's output or an "
    "in-memory counter: " + _KEY_FIX,
    Cause.KEY_NEW_PER_CALL: "compute the key once per action, before the retry loop, and reuse it on every "
    "retry: " + _KEY_FIX,
    Cause.SDK_GENERATED_KEY: "pass the key explicitly (stripe: idempotency_key=... on the create call); "
    "the SDK's automatic key is new in every process and only covers its own in-process retries: " + _KEY_FIX,
    Cause.MODEL_ID_KEY: "never build the key from the model's tool-call id (ToolContext.tool_call_id, a "
    "tool_use id): a model issues new ids on every answer; key by what the call does (thread, tool, its "
    "arguments' business ids): " + _KEY_FIX,
    Cause.IRREVERSIBLE_RESENT: "gate the send: claim it durably before sending, and when a claim is left "
    "in flight by a kill, reconcile with the provider (mailbox.lookup(ref), the Message-ID) before "
    "sending again (killdrill.effects.gate); make it the last step",
    Cause.UNKEYED_RESENT: "the provider takes no key: record the call durably with a client reference and "
    "reconcile with the provider's read (get/lookup by ref) before calling again "
    "(killdrill.effects.durable_effect / gate)",
    Cause.PROVIDER_NOT_DEDUPING: "the provider did not replay a repeated key: check that the operation "
    "honours keys (keyed=True in its ProviderSpec) and that the key reaches it (the Idempotency-Key "
    "header, the idempotency_key field); otherwise reconcile by a lookup before repeating",
    Cause.KEY_SHARED_BY_EFFECTS: "make the key name exactly one action: include what differs between the "
    "effects (account, item, occurrence) in it; a counter held in memory restarts in every process",
    Cause.PAYLOAD_RECOMPUTED: "compute the payload once, checkpoint it, and send the same value on replay "
    "(a value read again on resume, a timestamp, a model's wording must come from the checkpoint)",
    Cause.UNFINISHED_RESUME: "resume whenever the thread is not finished: snap = graph.get_state(config); "
    "if snap.next or snap.tasks: graph.invoke(None, config) (a step whose writes were saved before the "
    "kill is a task, not next)",
    Cause.RUN_NOT_COMPLETED: "fix the failure that stopped the run (listed in this case); the missing "
    "effects follow from it",
    Cause.CALL_REFUSED: "retry a refused call under the same key with the same payload; a 409 (key in "
    "flight) or an injected failure must be retried, not given up",
    Cause.NOT_CALLED: "make sure a resumed attempt re-sends every effect its checkpoint does not prove "
    "(with its stable key, so the provider replays it): a step marked done before its effect, or a "
    "resume that stops early, drops it",
    Cause.NON_CONVERGENT_WRITE: "write the absolute value computed once and checkpointed (a set), never a "
    "read-modify-write or an increment disguised as a set; use a keyed counter for counts",
    Cause.KEY_ABANDONED: "after a kill or an ambiguous error, retry with the same key until the provider "
    "answers; never give the key up or switch keys",
    Cause.COMPENSATION_OUT_OF_ORDER: "undo in the reverse order of the actions (a saga's compensations "
    "run last-done first), each under its own stable key",
    Cause.CONSEQUENCE: "fix the violation it is listed under",
    Cause.RESUME_CRASHED: "the resumed attempt failed on its own: fix what its stderr shows (shown with "
    "the attempt); a resume must start from the checkpoint and tolerate the killed attempt's leftovers",
    Cause.HANG: "find what the last boundary waits on: a lock or claim held by the killed attempt, a key "
    "answered 409 forever; release or reconcile stale claims on resume",
    Cause.POINT_NOT_REACHED: "a clean run reaches this point and this case did not: the run depends on "
    "state outside its workdir or on timing; put {workdir} and {thread} in the command",
    Cause.HARNESS: "a harness failure, not a verdict on the agent: if the ledger changed under the case, "
    "the agent deletes files in its workdir's .killdrill/; otherwise report it",
    Cause.UNEXPLAINED: "compare the effect with the baseline's (shown); if the field legitimately varies "
    "between runs pin the identity (--identity provider.op=fields), else compute it once and checkpoint it",
}

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


def _lost_phrase(v: Violation) -> str:
    """How the first landed call's caller lost track of it: the response lost, or a kill before the
    checkpoint recorded it."""
    calls = v.detail.get("calls") or []
    lost = [c for c in calls if isinstance(c, Mapping) and c.get("response_lost")]
    if lost:
        c = lost[0]
        return (
            f"attempt {c['attempt']}'s call landed but its response was lost (killed at {c['response_lost']})"
        )
    landed = [c for c in v.calls if c.landed]
    return f"attempt {landed[0].attempt}'s call landed before its kill" if landed else ""


def _irreversible(provider: str) -> bool:
    """No operation takes a key, and a ``lookup`` read reconciles: the irreversible class (mailbox)."""
    ops = spec(provider).operations
    return bool(ops) and not any(o.keyed for o in ops) and any(o.read and o.name == "lookup" for o in ops)


def _key_cause(v: Violation, attempts: Sequence[Attempt]) -> tuple[Cause, str] | None:
    """The key story of one effect's calls, for ``duplicate_effect`` and ``key_changed``."""
    calls = list(v.calls)
    if not calls:
        return None
    provider, op = v.provider or "", v.op or ""
    operation = spec(provider).operation(op)
    keyed = bool(operation and operation.keyed)
    origin = key_origin(calls)
    lost = _lost_phrase(v)
    resent = f"; {lost}, and the effect was sent again" if lost else ""
    name = f"{provider}.{op}"
    if origin == "none":
        if keyed:
            return (
                Cause.NO_KEY,
                f"{name} was sent without an idempotency key in "
                f"{_attempts_phrase(c.attempt for c in calls)}{resent}",
            )
        if _irreversible(provider):
            return (
                Cause.IRREVERSIBLE_RESENT,
                f"{name} is irreversible (no key can dedupe it) and was sent by "
                f"{_attempts_phrase(c.attempt for c in v.calls if c.landed)}{resent}",
            )
        return (
            Cause.UNKEYED_RESENT,
            f"{name} takes no idempotency key and was called by "
            f"{_attempts_phrase(c.attempt for c in v.calls if c.landed)}{resent}",
        )
    if origin == "dropped":
        without = _attempts_phrase(c.attempt for c in calls if c.key is None)
        return (
            Cause.KEY_DROPPED,
            f"{name} was sent without its key in {without} and with it elsewhere{resent}",
        )
    shapes = sorted({s for c in calls if c.key and (s := key_shape(c.key)) and s != "sdk"})
    made = f" (the keys look made from {' and '.join(shapes)})" if shapes else ""
    n = len({c.key for c in calls})
    if origin == "sdk":
        return (
            Cause.SDK_GENERATED_KEY,
            f"{name}'s {n} keys have the shape of the stripe SDK's automatic Idempotency-Key (16 random "
            f"bytes, new in every process: {calls[0].key}){resent}",
        )
    if origin == "per_call":
        return (
            Cause.KEY_NEW_PER_CALL,
            f"{name} got a new key on a retry within one attempt ({n} keys){made}{resent}",
        )
    if origin == "per_attempt":
        return (
            Cause.KEY_NEW_PER_ATTEMPT,
            f"{name} got a new key in every attempt ({n} keys over "
            f"{_attempts_phrase(c.attempt for c in calls)}){made}{resent}",
        )
    # one key, landed more than once
    if not keyed:
        if _irreversible(provider):
            return (
                Cause.IRREVERSIBLE_RESENT,
                f"{name} is irreversible: its ref {calls[0].key} is not a key the provider dedupes by; "
                f"sent by {_attempts_phrase(c.attempt for c in v.calls if c.landed)}{resent}",
            )
        return (
            Cause.UNKEYED_RESENT,
            f"{name} takes no idempotency key; landed {len([c for c in calls if c.landed])} times{resent}",
        )
    return (
        Cause.PROVIDER_NOT_DEDUPING,
        f"{name} landed {len([c for c in calls if c.landed])} times under the one key {calls[0].key}",
    )


_KEYED = (DUPLICATE_EFFECT, KEY_CHANGED)


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


def _diagnose_one(v: Violation, attempts: Sequence[Attempt], stopped: Violation | None) -> tuple[Cause, str]:
    kind = v.kind
    if kind in (DUPLICATE_EFFECT, KEY_CHANGED):
        found = _key_cause(v, attempts)
        if found is not None:
            return found
    if kind == KEY_REUSED:
        differs = list(v.detail.get("differs", ()))
        ident = v.identity or {}
        named = [f for f in differs if f in ident and f != "op"]
        if "recomputed" in v.message or "varies between clean runs" in v.message or not named:
            return (
                Cause.PAYLOAD_RECOMPUTED,
                f"key {v.detail.get('key')} was sent again with another {', '.join(differs)} "
                f"({_attempts_phrase(v.detail.get('attempts', ()))}): the payload was recomputed on replay",
            )
        return (
            Cause.KEY_SHARED_BY_EFFECTS,
            f"key {v.detail.get('key')} named {len(v.detail.get('effects', ()))} different effects "
            f"(they differ in {', '.join(named)})",
        )
    if kind == MISSING_EFFECT:
        unfinished = _last_unfinished(attempts)
        if not v.calls and unfinished is not None:
            return (
                Cause.UNFINISHED_RESUME,
                f"attempt {unfinished.number} exited 0 with the thread unfinished: the checkpointer still "
                f"holds pending tasks ({', '.join(unfinished.unfinished)})"
                + "".join(
                    f"; attempt {a.number} was killed at {a.killed_at}" for a in attempts if a.killed_at
                ),
            )
        if stopped is not None:
            return Cause.RUN_NOT_COMPLETED, f"the run did not complete ({stopped.kind}): {stopped.message}"
        refused = [c for c in v.calls if c.outcome in (REJECTED, CONFLICT, FAILED)]
        if refused:
            c = refused[-1]
            return (
                Cause.CALL_REFUSED,
                f"attempt {c.attempt}'s call was {c.outcome} and not retried to a landing",
            )
        if not v.calls:
            return Cause.NOT_CALLED, f"no attempt called it: {_killed_story(attempts)} without calling it"
        return Cause.UNEXPLAINED, "it was called but landed fewer times than in the baseline"
    if kind == UNEXPECTED_EFFECT:
        return Cause.UNEXPLAINED, "no clean run made this effect; see how it differs from the baseline's"
    if kind == STATE_DIVERGED:
        writers = sorted({c.attempt for c in v.calls})
        if len(writers) > 1:
            return (
                Cause.NON_CONVERGENT_WRITE,
                f"kv {v.detail.get('key')!r} was written by {_attempts_phrase(writers)} and ended elsewhere "
                "than the baseline: the write does not converge when repeated",
            )
        return Cause.UNEXPLAINED, f"kv {v.detail.get('key')!r} ended elsewhere than the baseline"
    if kind == STUCK_IN_FLIGHT:
        return (
            Cause.KEY_ABANDONED,
            f"key {v.detail.get('key')} was claimed by attempt {v.detail.get('attempt')} and no later call "
            "with it completed",
        )
    if kind == COMPENSATION_ORDER:
        return Cause.COMPENSATION_OUT_OF_ORDER, v.message
    if kind == RESUME_FAILED:
        if stopped is not None and stopped.kind == KEY_REUSED:  # the provider refused the replay
            return (
                Cause.PAYLOAD_RECOMPUTED,
                f"the provider refused key {stopped.detail.get('key')} sent again with another payload "
                f"(differs in {', '.join(stopped.detail.get('differs', ()))}), so the run could not finish",
            )
        return Cause.RESUME_CRASHED, v.message
    if kind == HANG:
        return Cause.HANG, v.message
    if kind == POINT_NOT_REACHED:
        return Cause.POINT_NOT_REACHED, v.message
    if kind == HARNESS_ERROR:
        return Cause.HARNESS, v.message
    return Cause.UNEXPLAINED, "the drill has no more to say than the message"


# ---------------------------------------------------------------- consequences

_ROOT_KINDS = (DUPLICATE_EFFECT, KEY_CHANGED, KEY_REUSED, UNEXPECTED_EFFECT)


def _sub(text: str, ids: Iterable[str]) -> str:
    for i in sorted(set(ids), key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(i)}(?![A-Za-z0-9_])", "\x00ID\x00", text)
    return text


def _root_ids(root: Violation, baseline: LedgerSnapshot) -> tuple[set[str], set[str]]:
    """Effect ids the root's calls produced in the case, and its baseline counterpart's."""
    mine = {c.effect_id for c in root.calls if c.effect_id and c.landed}
    ident = canonical(root.identity or {})
    theirs = {
        c.effect_id
        for c in baseline.calls
        if c.effect_id
        and c.landed
        and c.provider == root.provider
        and c.op == root.op
        and _same_identity(c, root.identity or {}, ident)
    }
    return mine, theirs


def _same_identity(call: Call, identity: Mapping[str, Any], text: str) -> bool:
    return canonical({k: call.payload.get(k) for k in identity}) == text


def _only_ids_differ(got: Any, want: Any, mine: set[str], theirs: set[str]) -> bool:
    a, b = canonical(got), canonical(want)
    if a == b:
        return False
    return _sub(a, mine) == _sub(b, theirs) and (_sub(a, mine) != a)


def roots_and_consequences(violations: Sequence[Violation], baseline: LedgerSnapshot) -> list[Violation]:
    """Move missing/unexpected effects and diverged kv values that differ from the baseline only by
    an effect id a root violation produced under that root's ``consequences``."""
    roots = [v for v in violations if v.kind in _ROOT_KINDS and v.calls]
    if not roots:
        return list(violations)
    ids = {id(r): _root_ids(r, baseline) for r in roots}
    unexpected = [v for v in violations if v.kind == UNEXPECTED_EFFECT]
    missing = [v for v in violations if v.kind == MISSING_EFFECT]
    owner: dict[int, Violation] = {}  # id(consequence) -> root

    def explains(root: Violation, got: Any, want: Any) -> bool:
        mine, theirs = ids[id(root)]
        return bool(mine) and _only_ids_differ(got, want, mine, theirs)

    for u in unexpected:
        for root in roots:
            if root is u or id(u) in owner:
                continue
            partners = [m for m in missing if (m.provider, m.op) == (u.provider, u.op)]
            base = [
                {k: c.payload.get(k) for k in (u.identity or {})}
                for c in baseline.calls
                if c.landed and (c.provider, c.op) == (u.provider, u.op)
            ]
            for m in partners:
                if explains(root, u.identity, m.identity):
                    owner[id(u)] = root
                    owner[id(m)] = root
                    break
            else:
                if any(explains(root, u.identity, b) for b in base):
                    owner[id(u)] = root
    for s in (v for v in violations if v.kind == STATE_DIVERGED):
        for root in roots:
            if (
                s.detail.get("present")
                and s.detail.get("in_baseline")
                and explains(root, s.detail.get("value"), s.detail.get("baseline"))
            ):
                owner[id(s)] = root
                break
    if not owner:
        return list(violations)
    # a root that is itself a consequence hangs under its own root
    out: list[Violation] = []
    children: dict[int, list[Violation]] = {}
    for v in violations:
        if id(v) in owner:
            children.setdefault(id(owner[id(v)]), []).append(v)
    for v in violations:
        if id(v) in owner:
            continue
        kids = children.get(id(v), [])
        if kids:
            name = f"{v.provider}.{v.op}"
            kids = [
                replace(
                    k,
                    cause=str(Cause.CONSEQUENCE),
                    observed=f"it differs from the baseline only by the id {name} produced "
                    f"({', '.join(sorted(ids[id(v)][0]))} instead of "
                    f"{', '.join(sorted(ids[id(v)][1])) or '-'})",
                    fix=FIXES[Cause.CONSEQUENCE],
                )
                for k in kids
            ]
            v = replace(v, consequences=(*v.consequences, *kids))
        out.append(v)
    return out


# ---------------------------------------------------------------- entry points


def diagnose(
    violations: Sequence[Violation],
    *,
    baseline: LedgerSnapshot,
    attempts: Sequence[Attempt],
    ledger: LedgerSnapshot | None = None,
) -> list[Violation]:
    """``violations`` with a cause, what was observed, and a fix each; consequences nested under
    their root (``ledger``: the case's, for the ids its model issued).  Idempotent: a violation
    that has a cause keeps it."""
    issued = issued_ids(ledger)
    refused = next(
        (v for v in violations if v.kind == KEY_REUSED and any(c.outcome == REJECTED for c in v.calls)), None
    )
    stopped = refused or next((v for v in violations if v.kind in (RESUME_FAILED, HANG, HARNESS_ERROR)), None)
    out = []
    for v in violations:
        if v.cause is None:
            story = model_id_story(v.calls, issued, f"{v.provider}.{v.op}") if v.kind in _KEYED else None
            if story is not None:
                cause, observed = Cause.MODEL_ID_KEY, story
            else:
                cause, observed = _diagnose_one(v, attempts, stopped if stopped is not v else None)
            v = replace(v, cause=str(cause), observed=observed, fix=FIXES[cause])
        out.append(v)
    return roots_and_consequences(out, baseline)


def regroup_summary(
    summary: Mapping[str, Mapping[str, int]], violations: Sequence[Violation]
) -> dict[str, dict[str, int]]:
    """Per provider counts where the effects listed as consequences count as ``consequence``,
    not as lost or unexpected: the summary counts root causes."""
    out = {p: dict(c) for p, c in summary.items()}
    for v in violations:
        for k in v.consequences:
            counts = out.get(k.provider or "")
            if counts is None:
                continue
            if k.kind == STATE_DIVERGED:  # a kv value that changed: its set counted as lost + unexpected
                if counts.get("lost", 0) > 0 and counts.get("unexpected", 0) > 0:
                    counts["lost"] -= 1
                    counts["unexpected"] -= 1
                    counts["consequence"] = counts.get("consequence", 0) + 1
                continue
            field = {str(MISSING_EFFECT): "lost", str(UNEXPECTED_EFFECT): "unexpected"}.get(str(k.kind))
            if field is None or counts.get(field, 0) <= 0:
                continue
            counts[field] -= 1
            # one changed effect: its lost + unexpected pair counts once
            paired = any(o.kind == UNEXPECTED_EFFECT and o.provider == k.provider for o in v.consequences)
            if k.kind == UNEXPECTED_EFFECT or not paired:
                counts["consequence"] = counts.get("consequence", 0) + 1
    return out

"""Where a key changed: within one attempt (a client's own retry, after ``drop:``) or between
attempts, never "between attempts" of two calls of one attempt."""

from __future__ import annotations

from killdrill.records import CREATED, DUPLICATE_EFFECT, EXITED, KEY_CHANGED, Attempt
from killdrill.verdict import judge
from tests.unit.verdict.test_verdict import BASELINE, EMAIL, TWO_ATTEMPTS, call, snap

ONE_ATTEMPT = (
    Attempt(number=1, kill="drop:payments.charge", outcome=EXITED, returncode=0, duration_ms=10.0),
)


def test_two_keys_in_one_attempt_are_said_to_change_within_it() -> None:
    case = snap(
        call(key="k1", attempt=1),  # the response was dropped: the client retried with a new key
        call(key="k2", attempt=1, outcome=CREATED),
        call("mailbox", "send", None, EMAIL, attempt=1),
    )
    got = {v.kind: v.message for v in judge(BASELINE, case, ONE_ATTEMPT)}
    assert set(got) == {DUPLICATE_EFFECT, KEY_CHANGED}
    for message in got.values():
        assert "between attempts" not in message and "across attempts" not in message, message
        assert "within attempt 1" in message, message


def test_two_keys_in_two_attempts_are_still_between_attempts() -> None:
    case = snap(
        call(key="k1", attempt=1),
        call(key="k2", attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    got = {v.kind: v.message for v in judge(BASELINE, case, TWO_ATTEMPTS)}
    assert "the key changed between attempts" in got[DUPLICATE_EFFECT]
    assert "across attempts" in got[KEY_CHANGED] and "within attempt" not in got[KEY_CHANGED]

"""The verdict's shortcuts at 10^5 effects give the same answers as the long way.

- :attr:`Effect.plain` effects skip the core per-effect checks (``quiet_on_plain``): each of
  those checks is run on random plain effects and must say nothing, and ``judge`` with the skip
  must equal ``judge`` run check by check without it;
- ``canonical_json``'s per-thread C encoder gives the text the standard encoder gives, and still
  refuses a cycle (twice in a row: its markers are cleared after a failure);
- the ledger's shortcut past payloads with nothing to replace (one search of their stored
  text) replaces exactly what the full walk replaces;
- the ledger's reader of stored JSON (``json_reader``) gives what ``json.loads`` gives, errors
  included;
- a read with placeholders written back (``Substitution``, as the rows are parsed) gives what
  the full walk gives over the plain read.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from killdrill.canonical import _LENIENT, canonical_json, json_reader
from killdrill.ledger._substitute import Substitution, replace_all
from killdrill.records import Attempt, Call, LedgerSnapshot
from killdrill.verdict import judge
from killdrill.verdict.checks import CheckContext, registered_checks

PROVIDERS = ("payments", "mailbox", "kv", "tickets")
OUTCOMES = ("created", "replayed", "rejected", "failed")
ATTEMPTS = (
    Attempt(1, "before:x", "killed", -9, 1.0, killed_at="before:x"),
    Attempt(2, None, "exited", 0, 1.0),
)

calls_st = st.lists(
    st.tuples(
        st.sampled_from(PROVIDERS),
        st.sampled_from(("a", "b", "c")),  # the payload's one field: few values, so effects repeat
        st.sampled_from((None, "k1", "k2")),
        st.sampled_from(OUTCOMES),
        st.sampled_from((1, 2)),
    ),
    max_size=12,
)


def snapshot(rows: list[tuple[str, str, str | None, str, int]]) -> LedgerSnapshot:
    op = {"payments": "charge", "mailbox": "send", "kv": "set", "tickets": "create"}
    return LedgerSnapshot(
        calls=tuple(
            Call(i, p, op[p], key, {"to": v}, outcome, None, attempt, 1, 0.0)
            for i, (p, v, key, outcome, attempt) in enumerate(rows)
        )
    )


@settings(max_examples=300, deadline=None)
@given(calls_st, calls_st)
def test_core_checks_are_quiet_on_plain_effects_and_judge_skips_only_them(
    base_rows: list[Any], case_rows: list[Any]
) -> None:
    base, case = snapshot(base_rows), snapshot(case_rows)
    ctx = CheckContext.build(base, case, ATTEMPTS)
    checks = [c for c in registered_checks().values() if not c.opt_in]
    quiet = [c for c in checks if c.quiet_on_plain]
    assert {c.name for c in quiet} == {
        "unexpected_effect",
        "duplicate_effect",
        "missing_effect",
        "key_changed",
    }
    for effect in ctx.effects:
        if effect.plain:
            for c in quiet:
                assert list(c.fn(ctx, effect)) == [], (c.name, effect)
    long_way = [v for e in ctx.effects for c in checks if c.per_effect for v in c.fn(ctx, e)]
    long_way += [v for c in checks if not c.per_effect for v in c.fn(ctx)]
    assert judge(base, case, ATTEMPTS) == long_way


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_canonical_json_is_the_standard_encoders_text(value: Any) -> None:
    assert canonical_json(value) == _LENIENT.encode(value)


def test_canonical_json_still_refuses_a_cycle_and_recovers() -> None:
    loop: list[Any] = []
    loop.append(loop)
    for _ in range(2):
        try:
            canonical_json({"a": loop})
        except ValueError as e:
            assert "Circular" in str(e)
        else:
            raise AssertionError("a cycle was encoded")
    assert canonical_json({"b": [1, {"c": None}]}) == '{"b":[1,{"c":null}]}'


SUBS = {"t-1a2b": "{thread}", "/tmp/kd w/é": "{workdir}"}  # non-ASCII: every payload is walked
VERBATIM = {"t-1a2b": "{thread}", "/tmp/kd w": "{workdir}"}  # the search of the stored text decides
strings = st.sampled_from(
    ["t-1a2b", "x:t-1a2b:y", "/tmp/kd w/é/f", "plain", "it's", 'q"t-1a2b', "t-1a", "é\nt-1a2b\\", "\tt-1a"]
)
payloads = st.dictionaries(
    strings,
    strings | st.integers() | st.lists(strings, max_size=2) | st.dictionaries(strings, strings, max_size=2),
)


def normalize(snap: LedgerSnapshot, subs: dict[str, str]) -> LedgerSnapshot:
    """The oracle: every key, payload, context and state walked in full, no shortcut."""
    calls = tuple(
        replace(c, key=replace_all(c.key, subs), payload=replace_all(c.payload, subs),
                context=replace_all(c.context, subs))
        for c in snap.calls
    )  # fmt: skip
    in_flight = tuple(replace(f, key=replace_all(f.key, subs)) for f in snap.in_flight)
    return LedgerSnapshot(calls=calls, state=replace_all(snap.state, subs), in_flight=in_flight)


@settings(max_examples=300, deadline=None)
@given(payloads, st.sampled_from([SUBS, VERBATIM]))
def test_the_shortcut_replaces_what_the_full_walk_replaces(
    payload: dict[str, Any], subs: dict[str, str]
) -> None:
    sub = Substitution(subs)
    out = sub.json(canonical_json(payload), payload)
    assert out == replace_all(payload, subs)
    assert sub.key("t-1a2b:k") == "{thread}:k" and sub.key("k") == "k"
    if out == payload:
        assert out is payload  # nothing to change: no copy


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([*SUBS, *VERBATIM, "{thread}", ":", "k", "é", ""]), max_size=6).map("".join),
    st.sampled_from([SUBS, VERBATIM, {"ab": "b", "b": "ab"}]),
)
def test_a_key_is_replaced_as_the_full_walk_replaces_it(key: str, subs: dict[str, str]) -> None:
    assert Substitution(subs).key(key) == replace_all(key, subs)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_ledger_reader_parses_what_json_loads_parses(value: Any) -> None:
    text = canonical_json(value)
    assert json_reader()(text) == json.loads(text)


@pytest.mark.parametrize("text", ['{"a":1} x', "", "{", '{"a":1}{"b":2}', "[1,]", " 1"])
def test_the_ledger_reader_refuses_what_json_loads_refuses(text: str) -> None:
    try:
        expected: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError) as got:
            json_reader()(text)
        assert str(got.value) == str(exc)
    else:
        assert json_reader()(text) == expected


@settings(max_examples=100, deadline=None)
@given(
    st.lists(payloads, min_size=1, max_size=4),
    st.sampled_from(["t-1a2b", "x"]),
    st.sampled_from([SUBS, VERBATIM]),
)
def test_a_read_with_placeholders_is_the_plain_read_normalised(
    tmp_path_factory: pytest.TempPathFactory, many: list[dict[str, Any]], thread: str, subs: dict[str, str]
) -> None:
    from killdrill.ledger import Ledger

    path = tmp_path_factory.mktemp("subst") / "ledger.sqlite"
    ledger = Ledger(str(path), thread)
    with ledger.transaction() as tx:
        for i, payload in enumerate(many):
            tx.record("payments", "charge", f"{thread}:k{i}", payload, "created", None, 1, 1)
    plain = ledger.snapshot()
    first = Ledger(str(path), thread).snapshot(written_as=subs)
    assert first == normalize(plain, subs)
    assert Ledger(str(path), thread).snapshot(first, written_as=subs) == first

"""The model fake's script: replies chosen by the conversation, varied per attempt only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from killdrill.fakes.model import anthropic_conversation, openai_conversation
from killdrill.fakes.model_script import Conversation, ScriptError, Turn, load_script

SCRIPT = """
model: gpt-4o-mini
rules:
  - name: charge
    when:
      turn: 0
      last_user: {regex: "order (?P<order>[A-Z]-\\\\d+) for (?P<amount>\\\\d+) cents"}
    reply:
      content: ["Charging.", "Taking the payment.", "On it."]
      tool_calls:
        - name: charge_card
          arguments: {order_id: "${order}", amount_cents: "${amount}", memo: {$vary: "for ${order}"},
                      channel: {$vary: [web, app]}, retries: {$vary: 2}}
  - name: done
    when: {after_tool: charge_card, any: {regex: "order (?P<order>[A-Z]-\\\\d+)"}}
    reply: {content: "Charged ${order}."}
"""

USER = "Settle order A-17 for 4200 cents please."


@pytest.fixture
def script(tmp_path: Path):
    path = tmp_path / "model.yaml"
    path.write_text(SCRIPT)
    return load_script(path)


def first_turn() -> Conversation:
    return Conversation((Turn("system", "You are a shop agent."), Turn("user", USER)))


def test_rule_chosen_by_the_conversation_with_captures(script) -> None:
    reply = script.answer(first_turn())
    assert reply.rule == "charge"
    assert reply.content == "Charging."
    [call] = reply.tool_calls
    assert call.name == "charge_card"
    # ${amount} alone becomes a number; $vary without variance is its first/plain value
    assert call.arguments == {
        "order_id": "A-17",
        "amount_cents": 4200,
        "memo": "for A-17",
        "channel": "web",
        "retries": 2,
    }
    after = Conversation(
        (
            *first_turn().turns,
            Turn("assistant", "x", tool_calls=("charge_card",)),
            Turn("tool", "ok", "charge_card"),
        )
    )
    assert script.answer(after).content == "Charged A-17."


def test_same_conversation_same_reply_whatever_was_asked_before(script) -> None:
    """No cursor: asking twice, or after other questions, gives the same answer; the ids are a
    function of the attempt and of how many times it asked, never of what came before."""
    a = script.answer(first_turn())
    script.answer(Conversation((Turn("user", "order B-2 for 5 cents"),)))
    b = script.answer(first_turn())
    assert a == b


def test_ids_differ_on_every_answer_without_variance_and_reproduce(script) -> None:
    """Like a real model: a resumed attempt, or a retry within one, gets new tool-call and response
    ids for the same conversation; the wording and arguments stay; the same attempt and asking
    give the same ids again (a reproduction reproduces)."""
    answers = [script.answer(first_turn(), attempt=a, asked=n) for a, n in ((1, 0), (2, 0), (1, 1))]
    assert len({r.tool_calls[0].id for r in answers}) == 3 and len({r.nonce for r in answers}) == 3
    assert len({r.content for r in answers}) == 1
    assert len({json.dumps(r.tool_calls[0].arguments) for r in answers}) == 1
    assert script.answer(first_turn(), attempt=2) == answers[1]
    assert script.answer(first_turn(), attempt=2, variance=3).tool_calls[0].id != answers[1].tool_calls[0].id


def test_variance_changes_wording_ids_and_marked_values_per_attempt(script) -> None:
    base = script.answer(first_turn())
    replies = [script.answer(first_turn(), variance=0, attempt=n) for n in (1, 2, 3)]
    assert replies[0].tool_calls[0].arguments == base.tool_calls[0].arguments  # seed 0, attempt 1: plain
    assert len({r.content for r in replies}) == 3
    assert len({r.tool_calls[0].id for r in replies}) == 3
    second = replies[1].tool_calls[0].arguments
    assert second["memo"] == "for A-17 (v1)" and second["channel"] == "app" and second["retries"] == 3
    # pinned values never vary
    assert all(r.tool_calls[0].arguments["order_id"] == "A-17" for r in replies)
    assert all(r.tool_calls[0].arguments["amount_cents"] == 4200 for r in replies)
    # seeded: the same seed and attempt give the same variant, in any process
    assert script.answer(first_turn(), variance=0, attempt=2) == replies[1]
    assert script.answer(first_turn(), variance=5, attempt=2) != replies[1]


def test_digest_ignores_the_models_own_wording_and_ids() -> None:
    said = [Turn("user", USER), Turn("assistant", "Charging.", tool_calls=("charge_card",))]
    other = [Turn("user", USER), Turn("assistant", "On it.", tool_calls=("charge_card",))]
    assert Conversation(tuple(said)).digest == Conversation(tuple(other)).digest
    assert Conversation((Turn("user", USER + "!"),)).digest != Conversation((Turn("user", USER),)).digest


def test_no_matching_rule_is_one_line_with_the_digest(script) -> None:
    conv = Conversation((Turn("user", "what is the weather?"),))
    with pytest.raises(ScriptError) as err:
        script.answer(conv)
    text = str(err.value)
    assert "\n" not in text and "no rule matches" in text and conv.digest in text and "weather" in text


def test_digest_and_fallback_rules(tmp_path: Path) -> None:
    conv = Conversation((Turn("user", "hello"),))
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            {
                "rules": [
                    {"when": {"digest": conv.digest}, "reply": "pinned"},
                    {"reply": {"content": "fallback"}},
                ]
            }
        )
    )
    script = load_script(path)
    assert script.answer(conv).content == "pinned"
    assert script.answer(Conversation((Turn("user", "bye"),))).content == "fallback"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rules: []", "non-empty `rules`"),
        ("rules: [{when: {last_usr: x}, reply: hi}]", "unknown condition(s) ['last_usr']"),
        ("rules: [{when: {last_user: {regex: '('}}, reply: hi}]", "regex"),
        ("rules: [{reply: {content: hi, tool_calls: [{arguments: {}}]}}]", "needs a name"),
        ("rules: [{reply: {tool_calls: [{name: t, arguments: {a: {$vary: []}}}]}}]", "$vary"),
        ("rules: [{when: {turn: one}, reply: hi}]", "turn takes a number"),
        ("rules: [{reply: {text: hi}}]", "unknown reply field(s)"),
        ("rules: [x", "not YAML"),
    ],
)
def test_script_mistakes_are_one_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScriptError) as err:
        load_script(path)
    assert expected in str(err.value) and "\n" not in str(err.value) and str(path) in str(err.value)


def test_both_apis_reduce_to_the_same_conversation() -> None:
    """The same exchange in OpenAI and Anthropic shapes matches the same rules (same digest)."""
    openai_body = {
        "messages": [
            {"role": "system", "content": "You are a shop agent."},
            {"role": "user", "content": [{"type": "text", "text": USER}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "charge_card"}}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        ]
    }
    anthropic_body = {
        "system": "You are a shop agent.",
        "messages": [
            {"role": "user", "content": USER},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "charge_card", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        ],
    }
    a, b = openai_conversation(openai_body), anthropic_conversation(anthropic_body)
    assert a.turns == b.turns
    assert a.last().tool == "charge_card"

"""The model fake's Responses API over the wire, driven by the real ``openai`` client."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from killdrill.fakes.http import FakesServer
from killdrill.fakes.model import ModelFake
from killdrill.fakes.model_script import load_script
from killdrill.ledger import Ledger

if importlib.util.find_spec("openai") is None:
    pytest.skip("needs openai", allow_module_level=True)

import openai

SCRIPT = """
model: gpt-4o-mini
rules:
  - name: charge
    when:
      turn: 0
      last_user: {regex: "order (?P<order>[A-Z]-\\\\d+) for (?P<amount>\\\\d+) cents"}
    reply:
      content: ["Charging.", "Taking the payment."]
      tool_calls:
        - name: charge_card
          arguments: {order_id: "${order}", amount_cents: "${amount}"}
  - name: done
    when: {after_tool: charge_card, any: {regex: "order (?P<order>[A-Z]-\\\\d+)"}}
    reply: {content: "Charged ${order}."}
"""
USER = "Settle order A-17 for 4200 cents."
TOOLS = [{"type": "function", "name": "charge_card", "parameters": {"type": "object", "properties": {}}}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "charge_card", "parameters": {"type": "object"}}}]


def _server(tmp_path: Path, variance: int | None = None, attempt: int = 1) -> FakesServer:
    path = tmp_path / "model.yaml"
    path.write_text(SCRIPT)
    return FakesServer(
        tmp_path / f"ledger-{attempt}.sqlite", attempt=attempt, model=ModelFake(load_script(path), variance)
    )


def _client(server: FakesServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


def test_tool_call_then_its_output_as_input_items(tmp_path: Path) -> None:
    with _server(tmp_path) as server:
        client = _client(server)
        first = client.responses.create(model="gpt-5", instructions="You bill.", input=USER, tools=TOOLS)
        message, call = first.output
        assert message.type == "message" and first.output_text == "Charging."
        assert call.type == "function_call" and call.name == "charge_card"
        assert call.call_id.startswith("call_")
        assert json.loads(call.arguments) == {"order_id": "A-17", "amount_cents": 4200}
        assert first.status == "completed" and first.usage is not None and first.usage.input_tokens > 0
        # the whole history as input items, as the Agents SDK sends it with a session
        history = [
            {"role": "user", "content": USER},
            *(item.model_dump(exclude_none=True) for item in first.output),
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"charge": "ch_1"}'},
        ]
        second = client.responses.create(model="gpt-5", instructions="You bill.", input=history, tools=TOOLS)
        assert second.output_text == "Charged A-17." and len(second.output) == 1
    calls = Ledger(tmp_path / "ledger-1.sqlite", "default").calls("model")
    assert [(c.op, c.payload["rule"], c.outcome) for c in calls] == [
        ("responses", "charge", "answered"),
        ("responses", "done", "answered"),
    ]
    assert calls[0].payload["tool_calls"] == ["charge_card"] and calls[0].payload["model"] == "gpt-5"


def test_previous_response_id_chains_and_an_unknown_one_is_a_400(tmp_path: Path) -> None:
    with _server(tmp_path) as server:
        client = _client(server)
        first = client.responses.create(model="gpt-5", input=USER, tools=TOOLS)
        call = first.output[-1]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "ok"}
        second = client.responses.create(
            model="gpt-5", previous_response_id=first.id, input=[output], tools=TOOLS
        )
        assert second.output_text == "Charged A-17." and second.previous_response_id == first.id
        with pytest.raises(openai.BadRequestError, match="resp_nope"):
            client.responses.create(model="gpt-5", previous_response_id="resp_nope", input=[output])
        unstored = client.responses.create(model="gpt-5", input=USER, tools=TOOLS, store=False)
        # the same question asked again: the same answer under new ids, as a real model gives
        assert unstored.output_text == first.output_text and unstored.id != first.id
        assert unstored.output[-1].arguments == call.arguments and unstored.output[-1].call_id != call.call_id
        other = client.responses.create(model="gpt-5", input=USER + " ", tools=TOOLS, store=False)
        with pytest.raises(openai.BadRequestError, match="not found"):
            client.responses.create(model="gpt-5", previous_response_id=other.id, input=[output])


def test_streaming_is_the_sdk_event_sequence_of_the_same_response(tmp_path: Path) -> None:
    with _server(tmp_path) as server:
        client = _client(server)
        plain = client.responses.create(model="gpt-5", input=USER, tools=TOOLS)
        events = list(client.responses.create(model="gpt-5", input=USER, tools=TOOLS, stream=True))
        assert [e.type for e in events] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        done = events[-1].response
        assert done.usage == plain.usage and done.id != plain.id  # asked again: new ids
        assert [(o.type, getattr(o, "arguments", None)) for o in done.output] == [
            (o.type, getattr(o, "arguments", None)) for o in plain.output
        ]
        # the SDK's own stream helper accumulates the same final response
        with client.responses.stream(model="gpt-5", input=USER, tools=TOOLS) as stream:
            final = stream.get_final_response()
        assert final.output_text == "Charging." and final.output[-1].arguments == plain.output[-1].arguments
    calls = Ledger(tmp_path / "ledger-1.sqlite", "default").calls("model")
    assert [c.payload["stream"] for c in calls] == [False, True, True]


def test_one_script_answers_chat_completions_and_responses_alike(tmp_path: Path) -> None:
    with _server(tmp_path) as server:
        client = _client(server)
        chat = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "system", "content": "You bill."}, {"role": "user", "content": USER}],
            tools=CHAT_TOOLS,
        )
        resp = client.responses.create(model="gpt-5", instructions="You bill.", input=USER, tools=TOOLS)
        [chat_call] = chat.choices[0].message.tool_calls or []
        # one conversation (the digests below), asked twice: the same call under a new id
        assert chat_call.function.arguments == resp.output[-1].arguments
        assert chat_call.id != resp.output[-1].call_id
    digests = [c.payload["digest"] for c in Ledger(tmp_path / "ledger-1.sqlite", "default").calls("model")]
    assert digests[0] == digests[1]


def test_variance_changes_call_ids_and_wording_per_attempt(tmp_path: Path) -> None:
    seen = []
    for attempt in (1, 2):
        with _server(tmp_path, variance=3, attempt=attempt) as server:
            resp = _client(server).responses.create(model="gpt-5", input=USER, tools=TOOLS)
            seen.append((resp.id, resp.output[-1].call_id, resp.output_text))
    assert seen[0][0] != seen[1][0] and seen[0][1] != seen[1][1] and seen[0][2] != seen[1][2]


def test_no_script_rule_is_a_400_naming_the_digest(tmp_path: Path) -> None:
    with _server(tmp_path) as server, pytest.raises(openai.BadRequestError, match="no rule matches"):
        _client(server).responses.create(model="gpt-5", input="hello")

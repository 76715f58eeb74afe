"""pydantic-ai's tool-call activity on Temporal: its points are named after the tool it calls."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from killdrill.integrations.temporal import _tool_name


@dataclass
class CallToolParams:  # the shape of pydantic-ai's activity argument
    name: str
    tool_args: dict[str, Any]


CallToolParams.__module__ = "pydantic_ai.durable_exec.temporal._toolset"


@dataclass
class Other:
    name: str
    tool_args: dict[str, Any]


def _input(*args: object) -> SimpleNamespace:
    return SimpleNamespace(args=args)


def test_a_pydantic_ai_tool_call_is_named_after_the_tool() -> None:
    params = CallToolParams("charge_card", {"amount": 1})
    assert _tool_name("agent__billing__toolset__<agent>__call_tool", _input(params, None)) == "charge_card"


def test_other_activities_keep_their_type() -> None:
    params = CallToolParams("charge_card", {})
    assert _tool_name("agent__billing__model_request", _input(params)) is None  # not a tool call
    assert _tool_name("call_tool", _input(Other("charge_card", {}))) is None  # not pydantic-ai's
    assert _tool_name("call_tool", _input()) is None

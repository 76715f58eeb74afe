"""A framework run inside an active integration's runtime (``Integration.covers``) is not said to be
off; a replay (``killdrill.agent.replays``) emits no point."""

from __future__ import annotations

import killdrill.agent as agent
from killdrill.drill.setup_checks import DETECT_ENV, detection_env, integration_hint


def test_the_agents_sdk_through_temporals_plugin_is_covered() -> None:
    assert integration_hint({"agents"}, ["temporal"]) is not None  # the SDK alone: its integration is off
    assert integration_hint({"agents", "temporalio.contrib.openai_agents"}, ["temporal"]) is None
    assert integration_hint({"langgraph", "temporalio.contrib.langgraph"}, ["temporal"]) is None
    # the plugin covers the SDK only when Temporal's integration is on
    assert integration_hint({"agents", "temporalio.contrib.openai_agents"}, []) is not None


def test_discovery_watches_the_covering_modules() -> None:
    watch = detection_env({}, ["temporal"], "/boot")[DETECT_ENV].split(",")
    assert "temporalio.contrib.openai_agents=temporalio" in watch and any(
        w.startswith("agents=") for w in watch
    )


def test_a_point_reached_in_a_replay_is_not_sent() -> None:
    sent: list[str] = []

    class Client:
        def send(self, point: str) -> None:
            sent.append(point)

    replaying = [True]

    def check() -> bool:
        return replaying[0]

    old = agent._client
    agent._client = Client()  # type: ignore[assignment]
    agent.replays(check)
    try:
        agent.boundary("before:tool")
        replaying[0] = False
        agent.boundary("before:tool")
    finally:
        agent.replays(check, on=False)
        agent._client = old
    assert sent == ["before:tool"]

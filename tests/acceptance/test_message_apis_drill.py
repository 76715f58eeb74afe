"""A real drill of an unmodified agent posting to Slack through slack_sdk under --http-fakes: the
gated post is exactly-once when killed after Slack posted; the ungated one is a second message,
diagnosed as an irreversible resend."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("slack_sdk") is None:
    pytest.skip("needs slack_sdk", allow_module_level=True)

from killdrill.drill import Drill, DrillOptions

NOTIFY = str(Path(__file__).parents[1] / "agents" / "wire" / "notify.py")


def drill(tmp_path: Path, *extra: str) -> Drill:
    options = DrillOptions(
        root=tmp_path,
        http_fakes=True,
        timeout=60,
        discovery_runs=1,
        env={"SLACK_API_URL": "{KILLDRILL_FAKES_URL}/slack/api/"},
    )
    command = ["python", NOTIFY, "--order", "o-{thread}", "--state", "{workdir}/state.json"]
    return Drill([*command, *extra], options)


def test_a_gated_slack_post_is_exactly_once_when_killed_after_slack_posted(tmp_path: Path) -> None:
    with drill(tmp_path) as d:
        assert d.points() == ["during:slack.post"]
        result = d.run_case("during:slack.post")
        assert result.ok, result.text()


def test_an_ungated_slack_post_is_a_second_message_diagnosed_irreversible(tmp_path: Path) -> None:
    with drill(tmp_path, "--bug", "ungated") as d:
        result = d.run_case("during:slack.post")
        assert "duplicate_effect" in result.kinds, result.text()
        causes = {v.cause for v in result.violations if v.kind == "duplicate_effect"}
        assert causes == {"irreversible_resent"}, result.text()

"""The model fake over HTTP: the real OpenAI and Anthropic SDKs, the ledger, the verdict, the report."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from killdrill.cli.commands import main as cli_main
from killdrill.drill import Drill, DrillOptions
from killdrill.fakes.http import FakesServer
from killdrill.fakes.model import ModelFake
from killdrill.fakes.model_script import load_script
from killdrill.ledger import Ledger
from killdrill.options import OptionError
from killdrill.records import ANSWERED, CREATED, Call, LedgerSnapshot
from killdrill.verdict import judge, summarize

# Found here, imported by the tests that use them in-process (seconds each; every xdist worker
# collects this module, one runs those tests).
_missing = [m for m in ("openai", "anthropic") if importlib.util.find_spec(m) is None]
if _missing:
    pytest.skip(f"needs {', '.join(_missing)}", allow_module_level=True)

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
LOOP_SCRIPT = AGENTS / "llm_loop.yaml"
USER = "Settle order A-17 for 4200 cents."
OPENAI_TOOLS = [{"type": "function", "function": {"name": "charge_card", "parameters": {"type": "object"}}}]


@pytest.fixture
def server(tmp_path: Path):
    with FakesServer(tmp_path / "ledger.sqlite", model=ModelFake(load_script(LOOP_SCRIPT))) as srv:
        yield srv


def _calls(tmp_path: Path) -> list[Call]:
    return Ledger(tmp_path / "ledger.sqlite", "default").calls("model")


def test_openai_sdk_tool_call_round_trip(server: FakesServer, tmp_path: Path) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    first = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": USER}], tools=OPENAI_TOOLS
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.id.startswith("call_") and call.function.name == "charge_card"
    assert json.loads(call.function.arguments) == {"order_id": "A-17", "amount_cents": 4200}
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0
    history = [
        {"role": "user", "content": USER},
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "charged ch_0001"},
    ]
    second = client.chat.completions.create(model="gpt-4o-mini", messages=history)
    assert second.choices[0].message.content == "Done." and second.choices[0].finish_reason == "stop"
    recorded = _calls(tmp_path)
    assert [(c.op, c.outcome, c.payload["rule"]) for c in recorded] == [
        ("chat", ANSWERED, "charge"),
        ("chat", ANSWERED, "done"),
    ]
    assert recorded[0].payload["prompt_tokens"] == first.usage.prompt_tokens


def test_openai_sdk_streaming_rebuilds_the_same_reply(server: FakesServer) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    kwargs = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": USER}], "tools": OPENAI_TOOLS}
    whole = client.chat.completions.create(**kwargs)
    text, args, ids, usage = "", "", set(), None
    for chunk in client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    ):
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or ():
                ids.add(tc.id) if tc.id else None
                args += tc.function.arguments or ""
    assert text == whole.choices[0].message.content
    # asked a second time: one new id, the same call
    assert len(ids) == 1 and ids != {whole.choices[0].message.tool_calls[0].id}
    assert json.loads(args) == json.loads(whole.choices[0].message.tool_calls[0].function.arguments)
    assert usage is not None and usage.total_tokens == whole.usage.total_tokens


def test_anthropic_sdk_tool_use_round_trip_and_stream(server: FakesServer, tmp_path: Path) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    tools = [{"name": "charge_card", "input_schema": {"type": "object"}}]
    msg = client.messages.create(
        model="claude-x", max_tokens=256, messages=[{"role": "user", "content": USER}], tools=tools
    )
    assert msg.stop_reason == "tool_use"
    use = next(b for b in msg.content if b.type == "tool_use")
    assert use.id.startswith("toolu_") and use.input == {"order_id": "A-17", "amount_cents": 4200}
    with client.messages.stream(
        model="claude-x", max_tokens=256, messages=[{"role": "user", "content": USER}], tools=tools
    ) as stream:
        streamed = stream.get_final_message()
    # asked a second time: the same blocks under a new id
    assert [b.model_dump(exclude={"id"}) for b in streamed.content] == [
        b.model_dump(exclude={"id"}) for b in msg.content
    ]
    assert streamed.id != msg.id and streamed.content[1].id != use.id  # type: ignore[union-attr]
    history = [
        {"role": "user", "content": USER},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "charged"}]},
    ]
    done = client.messages.create(model="claude-x", max_tokens=256, messages=history)
    assert done.stop_reason == "end_turn" and done.content[0].text == "Done."
    assert [c.op for c in _calls(tmp_path)] == ["messages", "messages", "messages"]


def test_no_rule_is_a_400_the_sdk_raises_with_the_digest(server: FakesServer, tmp_path: Path) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError, match=r"no rule matches this conversation.*digest"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "weather?"}])
    assert _calls(tmp_path) == []  # nothing answered, nothing spent


_ASK = f"""
import json, os, urllib.request
body = json.dumps({{"model": "gpt-4o-mini", "messages": [{{"role": "user", "content": {USER!r}}}]}}).encode()
url = os.environ["URL"] + "/v1/chat/completions"
req = urllib.request.Request(url, body, {{"Content-Type": "application/json"}})
reply = json.load(urllib.request.urlopen(req))
print(json.dumps(reply["choices"][0]["message"], sort_keys=True))
"""


def _ask_in_a_new_process(tmp_path: Path, name: str, attempt: int, variance: int | None) -> str:
    """A new server (the port changes per attempt in a drill) and a new client process."""
    model = ModelFake(load_script(LOOP_SCRIPT), variance)
    with FakesServer(tmp_path / f"{name}.sqlite", attempt=attempt, model=model) as srv:
        out = subprocess.run(
            [sys.executable, "-c", _ASK],
            env={"URL": srv.url or "", "PATH": ""},
            capture_output=True,
            text=True,
        )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_same_prompt_same_reply_across_processes_and_servers(tmp_path: Path) -> None:
    """No cursor: a resumed process asking the same question gets the same reply under new ids, as
    from a real model; the same attempt gets the same ids in any process (a reproduction
    reproduces); under variance the wording differs per attempt too."""
    plain = [json.loads(_ask_in_a_new_process(tmp_path, f"p{i}", a, None)) for i, a in enumerate((1, 1, 2))]
    assert plain[0] == plain[1]
    assert plain[1]["tool_calls"][0]["id"] != plain[2]["tool_calls"][0]["id"]
    assert plain[1]["content"] == plain[2]["content"]
    assert plain[1]["tool_calls"][0]["function"] == plain[2]["tool_calls"][0]["function"]
    varied = [
        _ask_in_a_new_process(tmp_path, f"v{i}", attempt=a, variance=4) for i, a in enumerate((2, 2, 3))
    ]
    assert varied[0] == varied[1] != varied[2]
    a, b = json.loads(varied[1]), json.loads(varied[2])
    assert a["content"] != b["content"] and a["tool_calls"][0]["id"] != b["tool_calls"][0]["id"]
    assert a["tool_calls"][0]["function"]["arguments"] == b["tool_calls"][0]["function"]["arguments"]


def _call(seq: int, provider: str, op: str, outcome: str, attempt: int, payload: dict) -> Call:
    return Call(seq, provider, op, None, payload, outcome, None, attempt, 0, 0.0)


def test_model_calls_are_never_judged_as_effects() -> None:
    """More model calls than the baseline, with other payloads: no violation, no effect counted."""
    charge = _call(2, "payments", "charge", CREATED, 1, {"amount": 1})
    charge = Call(2, "payments", "charge", "k", {"amount": 1}, CREATED, "ch_1", 1, 0, 0.0)
    baseline = LedgerSnapshot(calls=(_call(1, "model", "chat", ANSWERED, 1, {"digest": "a"}), charge))
    case = LedgerSnapshot(
        calls=(
            _call(1, "model", "chat", ANSWERED, 1, {"digest": "a"}),
            charge,
            _call(3, "model", "chat", ANSWERED, 2, {"digest": "a"}),
            _call(4, "model", "chat", CREATED, 2, {"digest": "b"}),  # even one marked created
        )
    )
    assert judge(baseline, case, ()) == []
    assert set(summarize(baseline, case)) == {"payments"}


LOOP = ["python", str(AGENTS / "llm_loop.py"), "--thread", "{thread}", "--ckpt", "{workdir}/ckpt.json"]


def _drill(tmp_path: Path, *args: str, variance: int | None = None) -> Drill:
    options = DrillOptions(
        root=tmp_path,
        model_script=str(LOOP_SCRIPT),
        model_variance=variance,
        launcher="fork",
        preload=("openai",),
        timeout=30,
        discovery_runs=1,
    )
    return Drill([*LOOP, *args], options)


def test_correct_loop_passes_every_point_under_variance_and_counts_respent_work(tmp_path: Path) -> None:
    with _drill(tmp_path, "--checkpoint", "turn", variance=7) as drill:
        result = drill.run_all()
    assert drill.discover().labels() == ["during:model.chat", "during:payments.charge", "during:model.chat#2"]
    assert all(case.ok for case in result.cases), result.text()
    by_point = {case.schedule: case.model for case in result.cases}
    # a kill at the tool (checkpointed per turn) re-asks the first question: one call re-spent
    charge = by_point["during:payments.charge"]
    assert charge["respent_calls"] == 1 and charge["respent_tokens"] > 0
    assert charge["calls"] == charge["baseline_calls"] + 1 == 3
    assert charge["calls_by_attempt"] == {"1": 1, "2": 2}
    text = result.text()
    assert "Model over all cases:" in text and "re-spent by resumes:" in text
    assert "Baseline model work: 2 calls" in text and "Baseline effects: payments.charge x1" in text
    data = result.to_dict()
    assert data["summary"]["model"]["respent_calls"] == sum(c.model["respent_calls"] for c in result.cases)
    assert data["cases"][1]["model"] == charge


def test_tool_call_id_key_is_caught_without_variance_with_the_models_id_as_cause(tmp_path: Path) -> None:
    """A key made of the tool-call id: the resume re-asks the model, which answers with a new id
    (as any model does), so the charge lands twice; the cause names the ids the model issued."""
    with _drill(tmp_path, "--key", "tool-call", "--checkpoint", "turn") as drill:
        case = drill.run_case("during:payments.charge")
    assert case.kinds == ("duplicate_effect", "key_changed"), case.text()
    assert case.ledger is not None
    charges = [c for c in case.ledger.calls if c.provider == "payments"]
    issued = {i: c.attempt for c in case.ledger.calls if c.provider == "model" for i in c.payload["ids"]}
    assert [c.attempt for c in charges] == [1, 2]
    assert [issued[str(c.key).removeprefix("call_")] for c in charges] == [1, 2]  # each attempt's own id
    cause = case.violations[0]
    assert cause.cause == "model_id_key", case.text()
    assert f"{charges[0].key} in attempt 1" in cause.observed
    assert "tool-call ids the model issued" in cause.observed
    assert "--model-variance" not in case.reproduce


def test_anthropic_loop_drills_too(tmp_path: Path) -> None:
    options = DrillOptions(
        root=tmp_path,
        model_script=str(LOOP_SCRIPT),
        launcher="fork",
        preload=("anthropic",),
        discovery_runs=1,
    )
    with Drill([*LOOP, "--api", "anthropic"], options) as drill:
        case = drill.run_case("during:model.messages#2")
    assert case.ok, case.text()
    assert case.model["respent_calls"] == 1


def test_model_options_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(OptionError, match=r"^model_variance= needs model_script= "):
        Drill(LOOP, DrillOptions(model_variance=1))
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [{when: {nope: 1}, reply: hi}]")
    assert cli_main(["points", "--model-script", str(bad), "--", *LOOP]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown condition(s) ['nope']" in err


def test_env_values_name_harness_variables(tmp_path: Path) -> None:
    """``--env NAME={KILLDRILL_FAKES_URL}/x`` is filled per attempt; a variable not set is one line."""
    agent = tmp_path / "show_env.py"
    agent.write_text(
        "import os, killdrill\n"
        "killdrill.boundary('before:x')\n"
        "assert os.environ['HOOK'] == os.environ['KILLDRILL_FAKES_URL'] + '/hooks/a', os.environ['HOOK']\n"
        "assert os.environ['OPENAI_BASE_URL'] == os.environ['KILLDRILL_FAKES_URL'] + '/v1'\n"
    )
    options = DrillOptions(
        root=tmp_path, model_script=str(LOOP_SCRIPT), env={"HOOK": "{KILLDRILL_FAKES_URL}/hooks/a"}
    )
    assert Drill(["python", str(agent)], options).run_case("before:x").ok
    with pytest.raises(
        OptionError, match=r"^env= names \{KILLDRILL_FAKES_URL\}, .* http_fakes= or model_script="
    ):
        DrillOptions(root=tmp_path, env={"HOOK": "{KILLDRILL_FAKES_URL}"})


def test_ini_keys_of_the_model_fake(pytester: pytest.Pytester) -> None:
    from killdrill.pytest_plugin import _ini_options

    pytester.makeini(
        f"[pytest]\nkilldrill_model_script = {LOOP_SCRIPT}\nkilldrill_model_variance = 3\n"
        "killdrill_pass_env = OPENAI_API_KEY HF_TOKEN\n"
    )
    options = _ini_options(pytester.parseconfig())
    assert options == {
        "model_script": str(LOOP_SCRIPT),
        "model_variance": 3,
        "pass_env": ("OPENAI_API_KEY", "HF_TOKEN"),
    }
    DrillOptions(**options)  # every ini key is a DrillOptions field


def test_pytest_marker_keywords_drill_with_the_model(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\n")
    agent = [*LOOP, "--key", "tool-call", "--checkpoint", "turn"]
    pytester.makepyfile(
        test_inner_model=f"""
        import pytest
        AGENT = {agent!r}

        @pytest.mark.killdrill(points=["during:payments.charge"], model_script={str(LOOP_SCRIPT)!r},
                               model_variance=0)
        def test_marker(killdrill, kill_point):
            result = killdrill.run(AGENT, kill_point)
            assert result.kinds == ("duplicate_effect", "key_changed")
            assert result.model["respent_calls"] == 1
        """
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)

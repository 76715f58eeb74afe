"""No real model from a drill: every attempt's model SDKs point at the model fake, scripted or
not, and the harness's model provider keys stay with the harness unless passed (``--pass-env``).

The proof that nothing leaves the machine runs the whole drill (harness and attempts) in a new
network namespace with only the loopback (``unshare -rn``: nothing can leave, whatever tries)
under ``strace -f`` recording every connect/sendto/sendmsg of every process, the C-level calls
included (so a try is seen too, not only a success: an audit hook sees Python's sockets only).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.options.reproduce import reproduce_args

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
LOOP = [sys.executable, str(AGENTS / "llm_loop.py"), "--thread", "{thread}", "--ckpt", "{workdir}/ckpt.json"]
REAL_LOOKING = {
    "OPENAI_API_KEY": "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678Stu901VwxYz",
    "ANTHROPIC_API_KEY": "sk-ant-api03-Abc123Def456Ghi789Jkl012Mno345Pqr678Stu901Vwx-AAAA",
    "HF_TOKEN": "hf_AbcDefGhiJklMnoPqrStuVwxYz0123456789",
    "OPENAI_BASE_URL": "https://api.openai.com/v1",
}
HOSTILE = {
    "HTTP_PROXY": "http://proxy.corp.invalid:3128",
    "HTTPS_PROXY": "http://proxy.corp.invalid:3128",
    "http_proxy": "http://proxy.corp.invalid:3128",
    "https_proxy": "http://proxy.corp.invalid:3128",
    "ALL_PROXY": "socks5://proxy.corp.invalid:1080",
    "STRIPE_SECRET_KEY": "sk_live_51AbcDefGhiJklMnoPqrStuVwxYz0123456789",
    "AWS_ACCESS_KEY_ID": "AKIAABCDEFGHIJKLMNOP",
    "AWS_SECRET_ACCESS_KEY": "abcdefghijklmnopqrstuvwxyz0123456789ABCD",
    "GITHUB_TOKEN": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
}
"""A corporate machine's or CI runner's environment: proxies off the machine, vendors' keys."""
_INET = re.compile(
    r"sa_family=AF_INET6?, sin6?_port=htons\((\d+)\), "
    r"(?:.*?inet_addr\(\"([^\"]+)\"\)|.*?inet_pton\(AF_INET6, \"([^\"]+)\")"
)
_LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _sandbox_missing() -> str | None:
    for tool in ("unshare", "strace", "ip"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    return "unprivileged network namespaces are off here" if probe.returncode else None


def _offline_drill(
    tmp_path: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], list[tuple[str, int]]]:
    """``killdrill ARGS`` in a namespace with only lo, every process's sends traced: the drill's
    result and every inet destination any process of it tried."""
    missing = _sandbox_missing()
    if missing:
        pytest.skip(missing)
    trace = tmp_path / "net.trace"
    sends = "connect,sendto,sendmsg,sendmmsg"
    script = f'ip link set lo up && exec strace -f -qq -e trace={sends} -e signal=none -o "$0" "$@"'
    env = {**os.environ, **REAL_LOOKING, **HOSTILE, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        ["unshare", "-rn", "sh", "-c", script, str(trace), sys.executable, "-m", "killdrill", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,  # the SDKs import slowly under strace on a loaded machine
    )
    tried = [
        (m.group(2) or m.group(3), int(m.group(1)))
        for line in trace.read_text().splitlines()
        if (m := _INET.search(line))
    ]
    return proc, tried


@pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="needs openai")
def test_a_real_looking_key_and_no_script_send_nothing_past_the_loopback(tmp_path: Path) -> None:
    proc, tried = _offline_drill(tmp_path, "points", "--discovery-runs", "1", "--", *LOOP)
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert "the agent called a model and the drill has no --model-script: model.chat" in first, first
    assert "the last message is user 'Settle order A-17 for 4200 cents.'" in first
    assert tried, "the agent's call to the model fake was not traced"  # the trace sees connects at all
    assert {host for host, _ in tried} <= _LOOPBACK, tried
    assert not [port for _, port in tried if port == 53], tried  # no name was even looked up


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("agents") is None, reason="needs openai-agents")
def test_an_agents_sdk_agent_with_no_script_stays_on_the_loopback_traces_included(tmp_path: Path) -> None:
    """The Agents SDK's default Responses API and its trace exporter (api.openai.com) alike."""
    proc, tried = _offline_drill(
        tmp_path,
        *(
            "points",
            "--integration",
            "openai_agents",
            "--http-fakes",
            "--smtp-fake",
            "--discovery-runs",
            "1",
            "--timeout",
            "300",
        ),
        *("--env", "STRIPE_API_BASE={KILLDRILL_FAKES_URL}", "--env", "SMTP_HOST={KILLDRILL_SMTP}"),
        *("--env", "MAIL_LOOKUP_URL={KILLDRILL_FAKES_URL}/fakes/mailbox/lookup"),
        "--",
        *("python", "-m", "killdrill.examples.billing_openai_agents", "--thread", "{thread}"),
        *("--db", "{workdir}/app.sqlite"),
    )
    assert proc.returncode == 2, proc.stderr
    assert "no --model-script: model.responses (model " in proc.stderr.splitlines()[0]
    assert tried and {host for host, _ in tried} <= _LOOPBACK, tried
    assert "Tracing" not in proc.stderr


SEES = """
import json, os, sys, urllib.request
import killdrill
killdrill.boundary("before:fetch")
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=10) as r:
    assert r.status == 200
open(sys.argv[2], "w").write(json.dumps({k: os.environ.get(k) for k in sys.argv[3:]}))
"""


def test_a_deployment_with_proxies_and_vendor_keys_set_stays_on_the_loopback(tmp_path: Path) -> None:
    """Service, driver and the harness's own http readiness probe: no connect past the loopback
    (the proxies are not followed, no name is looked up), and no vendor's key reaches the driver."""
    driver, seen = tmp_path / "driver.py", tmp_path / "seen.json"
    driver.write_text(SEES)
    proc, tried = _offline_drill(
        tmp_path,
        *("points", "--discovery-runs", "1", "--pass-env", "GITHUB_TOKEN"),
        *("--serve", "app=python -m http.server {port} --bind 127.0.0.1"),
        *("--ready", "app=http://127.0.0.1:{port}/", "--"),
        *("python", str(driver), "{port:app}", str(seen), *HOSTILE),
    )
    assert proc.returncode == 0, proc.stderr
    assert tried and {host for host, _ in tried} <= _LOOPBACK, tried
    assert not [port for _, port in tried if port == 53], tried
    got = json.loads(seen.read_text())
    assert got == {name: (HOSTILE[name] if name == "GITHUB_TOKEN" else None) for name in HOSTILE}, got


@pytest.mark.skipif(importlib.util.find_spec("temporalio") is None, reason="needs temporalio")
def test_a_temporal_drill_with_proxies_and_vendor_keys_set_stays_on_the_loopback(tmp_path: Path) -> None:
    """The dev server the drill starts looks nothing up (its version check is off) and the worker
    and client follow no proxy."""
    proc, tried = _offline_drill(
        tmp_path,
        *("points", "--integration", "temporal", "--discovery-runs", "1", "--timeout", "300", "--"),
        *("python", "-m", "killdrill.examples.payout_temporal", "--thread", "{thread}"),
    )
    assert proc.returncode == 0, proc.stderr
    assert tried and {host for host, _ in tried} <= _LOOPBACK, tried
    assert not [port for _, port in tried if port == 53], tried


def test_a_readiness_url_off_the_machine_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "killdrill", "points", "--serve", "app=python -m http.server {port}"),
            *("--ready", "app=http://example.com/", "--", "python", "-c", "pass"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "'http://example.com/' is not on this machine" in line and "--ready" in line, line


def _seen_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options: object) -> dict[str, str | None]:
    """What a drill's clean run of the loop saw of the model variables, the harness holding
    real-looking ones."""
    for name, value in REAL_LOOKING.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "seen.json"
    opts = DrillOptions(
        launcher="fork",
        preload=("openai",),
        root=tmp_path / "runs",
        model_script=str(AGENTS / "llm_loop.yaml"),
        discovery_runs=1,
        **options,
    )  # type: ignore[arg-type]
    with Drill([*LOOP, "--env-out", str(out)], opts) as drill:
        drill.discover()
    seen: dict[str, str | None] = json.loads(out.read_text())
    return seen


@pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="needs openai")
def test_provider_keys_stay_with_the_harness_unless_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _seen_env(tmp_path / "default", monkeypatch)
    assert (
        seen["OPENAI_API_KEY"] == "sk-killdrill-fake" and seen["ANTHROPIC_API_KEY"] == "sk-ant-killdrill-fake"
    )
    assert seen["HF_TOKEN"] is None
    assert seen["OPENAI_BASE_URL"] is not None and seen["OPENAI_BASE_URL"].startswith("http://127.0.0.1:")
    assert seen["OPENAI_AGENTS_DISABLE_TRACING"] == "1"
    passed = _seen_env(tmp_path / "passed", monkeypatch, pass_env=("OPENAI_API_KEY", "HF_TOKEN"))
    assert (
        passed["OPENAI_API_KEY"] == REAL_LOOKING["OPENAI_API_KEY"]
        and passed["HF_TOKEN"] == REAL_LOOKING["HF_TOKEN"]
    )
    assert str(passed["OPENAI_BASE_URL"]).startswith("http://127.0.0.1:")  # the key goes to the fake
    assert passed["ANTHROPIC_API_KEY"] == "sk-ant-killdrill-fake"  # not passed: still withheld


def test_pass_env_is_a_row_of_the_one_table() -> None:
    """The flag (repeatable) and the marker keyword land on one value; the reproduction repeats it."""
    from killdrill.cli.commands import build_parser, drill_options

    flags = ["points", "--pass-env", "OPENAI_API_KEY", "--pass-env", "HF_TOKEN", "--pass-env", "HF_TOKEN"]
    assert drill_options(build_parser().parse_args(flags)).pass_env == ("OPENAI_API_KEY", "HF_TOKEN")
    options = DrillOptions(pass_env=["OPENAI_API_KEY"])
    assert options.pass_env == ("OPENAI_API_KEY",)
    assert "--pass-env OPENAI_API_KEY" in " ".join(reproduce_args(options))


@pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="needs openai")
def test_an_unscripted_call_the_agent_survives_is_one_line_of_the_drill(tmp_path: Path) -> None:
    """An agent that swallows the model's error still hears what was asked, and the drill says it:
    a warning at discovery, a note in the case (model work not counted: nothing was answered)."""
    agent = tmp_path / "asks.py"
    agent.write_text(
        "import openai, killdrill\n"
        "killdrill.boundary('before:x')\n"
        "try:\n"
        "    openai.OpenAI(max_retries=0).chat.completions.create(\n"
        "        model='gpt-4o', messages=[{'role': 'user', 'content': 'What is 2+2?'}])\n"
        "except openai.BadRequestError as exc:\n"
        "    assert 'pass --model-script FILE' in str(exc) and 'What is 2+2?' in str(exc), exc\n"
        "else:\n"
        "    raise SystemExit('answered without a script')\n"
    )
    command = ["python", str(agent), "{thread}", "{workdir}"]  # read by nobody: nothing is resumed
    with Drill(command, DrillOptions(root=tmp_path / "r", discovery_runs=1)) as drill:
        with pytest.warns(UserWarning, match=r"no --model-script: model\.chat \(model 'gpt-4o'; the last"):
            drill.discover()
        case = drill.run_case("before:x")
    assert case.ok, case.text()
    [note] = [n for n in case.notes if "--model-script" in n]
    assert "\n" not in note and "user 'What is 2+2?'" in note and case.model == {}

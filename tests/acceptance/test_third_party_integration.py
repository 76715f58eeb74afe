"""A third party's integration, installed from a tmp distribution by the ``killdrill_plugins``
fixture (a dist-info folder on ``PYTHONPATH``, as pip lays one out) and found through the
entry-point group ``killdrill.integrations``: its points, its setup hint, its cause, its conform
probe and an option of its own, with nothing of killdrill touched.  The framework is a toy
durable runtime (``acme``: a task's result is recorded in a JSON file once it returns, and
replayed from there), in a distribution of its own (``acme-flows``) whose files the import watch
checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from killdrill import integrations
from killdrill.drill import Drill, DrillOptions
from killdrill.drill.setup_checks import SetupWarning
from killdrill.integrations import ENTRY_POINT_GROUP
from killdrill.pytest_plugin import PluginTester
from tests.cli_support import run_cli

ACME = '''
"""A toy durable runtime: each task's result is recorded once it returns; a recorded one replays."""
import json, os


class Run:
    def __init__(self, path):
        self.path = path
        self.done = json.load(open(path)) if os.path.exists(path) else {}

    def task(self, name, fn):
        if name in self.done:
            return self.done[name]
        out = fn()
        self.done[name] = out
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.done, f)
        os.replace(self.path + ".tmp", self.path)
        return out
'''

INTEGRATION = '''
"""The acme integration: before:/after:/committed:TASK around every task of acme.Run."""
from killdrill.agent import boundary
from killdrill.integrations import Cause, Integration, PatchOnImport, Probe
from killdrill.options.kinds import Choice, Option


def _patch(module):
    run = module.Run
    if getattr(run.task, "_killdrill", False):
        return
    orig = run.task

    def task(self, name, fn):
        def body():
            boundary(f"before:{name}")
            out = fn()
            boundary(f"after:{name}")
            return out

        recorded = name in self.done
        out = orig(self, name, body)
        if not recorded:
            boundary(f"committed:{name}")
        return out

    task._killdrill = True
    run.task = task


_hook = PatchOnImport(("acme",), _patch)


def activate():
    _hook.install()


def causes(v, attempts):
    if v.kind == "duplicate_effect" and any((a.killed_at or "").startswith("after:") for a in attempts):
        return Cause(
            "acme_task_unrecorded",
            "the task ran again on resume: acme records a task only once it returns",
            "key the call by the run and the task name, so the provider replays the second one",
        )
    return None


class Region:
    """The harness-side service: the region every process of a case runs its tasks in."""

    def __init__(self, region):
        self.region = region

    def env(self, workdir, thread):
        return {"ACME_REGION": self.region}

    def close(self):
        pass


def service(root, host, options):
    return Region(INTEGRATION.option(options, "acme_region"))


INTEGRATION = Integration(
    "acme",
    title="Acme Flows",
    aliases=("acme-flows",),
    distributions=("acme-flows",),
    modules=("acme",),
    hint="acme task",
    causes=causes,
    probe=Probe("kd_acme_probe", distribution="acme-flows", extra="acme", order=50),
    service=service,
    options=(Option("acme_region", Choice(("eu", "us")), "eu", "where acme runs its tasks", discovery=True),),
)
'''

PROBE = '''
"""The acme probe: reserve -> charge -> notify, each an acme task with one keyed effect."""
import argparse, os, sys

import acme
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--workdir", required=True)
a = p.parse_args()
os.makedirs(a.workdir, exist_ok=True)
fakes = connect()
run = acme.Run(os.path.join(a.workdir, "run.json"))
run.task("reserve", lambda: fakes.kv.set(f"hold/{a.thread}", {"amount": 4200}) and None)
charge = run.task("charge", lambda: fakes.payments.charge(
    idempotency_key=f"{a.thread}:charge", amount=4200, currency="usd", customer="acme")["id"])
run.task("notify", lambda: fakes.webhooks.post(
    idempotency_key=f"{a.thread}:notify", event="charged", charge=charge)["id"])
sys.exit(0)
'''

AGENT = """
import argparse, os, uuid

import acme
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--workdir", required=True)
p.add_argument("--bug", action="store_true")
p.add_argument("--region")  # the region the integration's service must have set, else exit 3
a = p.parse_args()
if a.region and os.environ.get("ACME_REGION") != a.region:
    raise SystemExit(3)
fakes = connect()
run = acme.Run(os.path.join(a.workdir, "run.json"))
key = str(uuid.uuid4()) if a.bug else f"{a.thread}:charge"
run.task("charge", lambda: fakes.payments.charge(idempotency_key=key, amount=100, currency="usd")["id"])
"""


@pytest.fixture
def site(killdrill_plugins: PluginTester) -> PluginTester:
    """The framework's distribution and the integration's (an entry point), installed for the test."""
    killdrill_plugins.distribution("acme-flows", {"acme/__init__.py": ACME})
    killdrill_plugins.distribution("kd-acme-probe", {"kd_acme_probe.py": PROBE})
    killdrill_plugins.install("acme", INTEGRATION, distribution="kd-acme")
    return killdrill_plugins


def _agent(tmp_path: Path, *extra: str) -> list[str]:
    (tmp_path / "agent.py").write_text(textwrap.dedent(AGENT))
    return ["python", str(tmp_path / "agent.py"), "--thread", "{thread}", "--workdir", "{workdir}", *extra]


def test_its_points_and_its_cause(site: PluginTester, tmp_path: Path) -> None:
    assert integrations.find("Acme-Flows").name == "acme"  # its alias, in any case
    assert integrations.find("acme").plugin == "kd-acme"  # the distribution its install hints name
    options = DrillOptions(root=tmp_path / "r", integrations=("acme",), timeout=60, discovery_runs=1)
    with Drill(_agent(tmp_path, "--bug"), options) as drill:
        assert {"before:charge", "after:charge", "committed:charge"} <= set(drill.points())
        case = drill.run_case("after:charge")
    dup = next(v for v in case.violations if v.kind == "duplicate_effect")
    assert dup.cause == "acme_task_unrecorded" and "key the call by the run" in (dup.fix or ""), case.text()


def test_its_setup_hint_when_its_integration_is_off(site: PluginTester, tmp_path: Path) -> None:
    options = DrillOptions(root=tmp_path / "r", timeout=60, discovery_runs=1)
    hint = "imports acme but the acme integration is off.*--integration acme.*every acme task"
    with Drill(_agent(tmp_path), options) as drill, pytest.warns(SetupWarning, match=hint):
        drill.discover()


def test_its_conform_probe(site: PluginTester, tmp_path: Path) -> None:
    out = tmp_path / "table.json"
    proc = run_cli(
        tmp_path, "conform", "--integration", "acme", "--property", "prefix_continuation", "--json", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    cells = json.loads(out.read_text())["cells"]
    assert [(c["framework"], c["property"], c["status"]) for c in cells] == [
        ("acme", "prefix_continuation", "holds")
    ], cells


def test_an_agents_own_modules_named_like_a_framework_give_no_hint(
    site: PluginTester, tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    """``workflows.py`` (LlamaIndex's module name), ``agents.py`` (the OpenAI Agents SDK's) and
    ``acme.py`` beside the agent: the agent's own, in no distribution, so no framework is in use."""
    for own in ("workflows", "agents"):
        (tmp_path / f"{own}.py").write_text("STEPS = ()\n")
    (tmp_path / "acme.py").write_text(textwrap.dedent(ACME))  # shadows the distribution's
    agent = _agent(tmp_path)
    (tmp_path / "agent.py").write_text("import workflows, agents\n" + (tmp_path / "agent.py").read_text())
    with Drill(agent, DrillOptions(root=tmp_path / "r", timeout=60, discovery_runs=1)) as drill:
        drill.discover()
    assert not [w for w in recwarn if issubclass(w.category, SetupWarning)], [str(w.message) for w in recwarn]


def test_its_own_option(site: PluginTester, tmp_path: Path) -> None:
    """The record's option row is spelled as the drill's own rows are: ``--acme-region`` on the
    command line (parsed by its kind, given only with its integration, written into the
    reproduction line), ``acme_region=`` as a keyword; its value reaches the integration's service
    and, through it, the agent's environment (the agent exits 3 unless ACME_REGION is ``us``)."""
    agent = _agent(tmp_path, "--region", "us")
    out = tmp_path / "case.json"
    done = run_cli(
        tmp_path, "run", "--integration", "acme", "--acme-region", "US", "-s", "after:charge",
        "--discovery-runs", "1", "--json", str(out), "--", *agent,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    case = json.loads(out.read_text())["cases"][0]
    assert case["verdict"] == "exactly-once", case
    assert " --acme-region us -- python " in case["reproduce"], case["reproduce"]
    for args, said in [
        (["--integration", "acme", "--acme-region", "mars"], ": expected one of eu, us, got 'mars'"),
        (["--acme-region", "us"], " needs --integration acme (an option of that integration)"),
    ]:
        bad = run_cli(tmp_path, "points", *args, "--", *agent)
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and lines == [f"killdrill: error: --acme-region{said}"], bad.stderr
    options = DrillOptions(root=tmp_path / "r", integrations=("acme",), timeout=60, discovery_runs=1)
    with Drill(agent, options, acme_region="us") as drill:
        assert "committed:charge" in drill.points()
    with Drill(agent, options) as drill, pytest.raises(Exception, match=r"exit(ed)? 3"):
        drill.discover()  # the default region (eu) is what the service gave the agent


BOOM = 'raise RuntimeError("acme-2 is not installed here")\n'
CLASH = """
from killdrill.integrations import Integration
from killdrill.options.kinds import Option, Text

INTEGRATION = Integration(
    "clash", title="Clash", distributions=("clash",), modules=("clash",),
    options=(Option("broker", Text(metavar="URL"), None, "a broker of its own"),),
)


def activate():
    pass
"""
BENT = """
from killdrill.integrations import Integration

INTEGRATION = Integration("bent", title="Bent", distributions=("bent",), causes=lambda violation: None)


def activate():
    pass
"""


@pytest.fixture
def broken(site: PluginTester) -> PluginTester:
    """Beside acme: a plugin that raises at import, one whose option is Celery's ``--broker``, and
    one whose causes hook takes one argument where the contract passes two."""
    for name, source in [("boom", BOOM), ("clash", CLASH), ("bent", BENT)]:
        site.distribution(f"kd-{name}", {f"kd_{name}.py": source}, {ENTRY_POINT_GROUP: {name: f"kd_{name}"}})
    return site


def test_broken_plugins_are_one_line_each_and_the_rest_works(broken: PluginTester, tmp_path: Path) -> None:
    """A plugin that raises at import, one whose option name is Celery's and one whose hook breaks
    the contract: each is one warning line naming it, and acme's drill runs; asking for the broken
    one is that line as an error."""
    done = run_cli(
        tmp_path, "run", "--integration", "acme", "--acme-region", "us", "-s", "after:charge",
        "--discovery-runs", "1", "--", *_agent(tmp_path, "--region", "us"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if "plugin" in line]
    assert any(
        "the integration plugin 'boom' (kd_boom) is broken and was skipped: RuntimeError: acme-2 is not"
        in line
        for line in said
    ), done.stderr
    assert any(
        "the integration plugin 'clash' declares the option broker, already the celery integration's" in line
        for line in said
    ), done.stderr
    assert (
        "killdrill: warning: the integration plugin 'bent' (kd_bent) was refused: its causes hook takes 1"
        " argument(s), the contract calls causes(violation, attempts)" in said
    ), done.stderr
    asked = run_cli(tmp_path, "points", "--integration", "boom", "--", "python", "-c", "pass")
    assert asked.returncode == 2 and "Traceback" not in asked.stderr, asked.stderr
    last = asked.stderr.splitlines()[-1]
    assert "the integration plugin 'boom' (kd_boom) is broken and was skipped" in last, asked.stderr


def test_the_off_switch_loads_no_plugin(broken: PluginTester, tmp_path: Path) -> None:
    env = {**os.environ, "KILLDRILL_DISABLE_PLUGINS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "killdrill", "points", "--integration", "acme", "--", "python", "-c", "pass"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2 and "skipped" not in done.stderr, done.stderr
    assert "unknown integration 'acme'" in done.stderr, done.stderr

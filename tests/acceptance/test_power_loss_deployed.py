"""Power loss in a deployment: the machine running the services and the driver loses power when a
process reaches a point.  Every process is killed at once, the workdir drops what was not
synced, then the services start again (same command, same port) and the driver is re-run.

The order service (``tests/agents/power/order_service.py``, ``http.server``) keeps its
idempotency records in one JSON file put in place with ``os.replace``; its client
(``tests/agents/deploy/client.py``) posts the order and retries until answered.  Without fsync
the records survive a kill of the service at its point after the write (the kernel holds them)
and not a power loss there: the service comes back with no record of its key and charges again
under a new one (cause ``unsynced_write``, the file named).  With the fsyncs of the file and its
directory the service is exactly-once under both.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from killdrill.faults.lossy_mount import is_mounted, unavailable
from tests.cli_support import run_cli
from tests.leftovers import survivors

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

AGENTS = Path(__file__).parents[1] / "agents"
SERVICE = (
    f"app=python {AGENTS / 'power' / 'order_service.py'} --port {{port}} --records {{workdir}}/records.json"
)
BUGGY = SERVICE + " --bug no-fsync"
CLIENT = [
    "python",
    str(AGENTS / "deploy" / "client.py"),
    "--url",
    "http://127.0.0.1:{port}/orders",
    "--order",
    "{thread}",
]
POINT = "app:during:payments.charge"  # the charge landed; the service is killed before it hears


def drill(tmp_path: Path, schedule: str, service: str, *args: str) -> tuple[int, str, dict[str, Any]]:
    """One case through the command line: its exit status, its text and its JSON report's case."""
    root, report = tmp_path / "w", tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
    out = run_cli(
        tmp_path, "run", "--schedule", schedule, "--discovery-runs", "1", "--root", str(root),
        "--json", str(report), *args, "--serve", service, "--", *CLIENT,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode in (0, 1), text
    assert not survivors(str(root), seconds=0.3), "a process of the case survived it"
    assert not [p for p in root.rglob(".killdrill-lossy-*")] and not any(
        is_mounted(p) for p in root.iterdir()
    ), "a lossy mount or its files were left"
    (case,) = json.loads(report.read_text())["cases"]
    return out.returncode, text, case


def charges(case: dict[str, Any]) -> list[tuple[int, str, str]]:
    """The case's landed charges from its ledger: (attempt, key, outcome)."""
    calls = case["ledger"]["calls"]
    return [(c["attempt"], c["key"], c["outcome"]) for c in calls if c["op"] == "charge"]


def by_number(case: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {a["number"]: a for a in case["attempts"]}


def test_records_not_synced_survive_a_kill_of_the_service_and_not_the_machines_power_loss(
    tmp_path: Path,
) -> None:
    rc, text, killed = drill(tmp_path, POINT, BUGGY)
    assert rc == 0, text
    (first, again) = charges(killed)
    assert first[1] == again[1] and again[2] == "replayed", killed["ledger"]  # its record was kept

    rc, text, case = drill(tmp_path, f"powerloss:{POINT}", BUGGY)
    assert rc == 1, text
    duplicate = next(v for v in case["violations"] if v["kind"] == "duplicate_effect")
    assert duplicate["cause"] == "unsynced_write", duplicate
    assert "dropped the unsynced data of records.json" in duplicate["observed"], duplicate
    assert "every process of the deployment killed" in duplicate["observed"], duplicate
    assert "fsync records.json" in duplicate["fix"] and "fsync the directory" in duplicate["fix"]
    # the machine: driver (1) and service (2) killed at once, then the service (3) started again
    # and the driver (4) re-run; what was lost recorded on the last launch before the loss
    attempts = by_number(case)
    assert [(n, a["process"], a["outcome"]) for n, a in sorted(attempts.items())] == [
        (1, "driver", "killed"), (2, "app", "killed"), (3, "app", "drained"), (4, "driver", "exited")
    ]  # fmt: skip
    assert attempts[2]["killed_at"] == "during:payments.charge"
    assert attempts[1]["killed_at"] == f"powerloss:{POINT}" and attempts[1]["kill"] == f"powerloss:{POINT}"
    (lost,) = attempts[2]["lost_writes"]
    assert lost["path"] == "records.json" and lost["size_kept"] == 0 and not lost["ever_synced"]
    # the ledger: charged by the service before the loss and again, under a new key, after it
    (before, after) = charges(case)
    assert (before[0], after[0]) == (2, 3) and before[1] != after[1], case["ledger"]
    assert before[2] == after[2] == "created"
    state = Path(case["workdir"]) / ".killdrill"
    ports = [(state / f"attempt-{n}.listen").read_text().split()[1] for n in (2, 3)]
    assert ports[0] == ports[1], ports  # started again on its own port
    # the one line the failure prints reproduces it through the command line
    line = shlex.split(text.split("Reproduce:\n", 1)[1].splitlines()[0])
    assert line[:3] == ["killdrill", "run", "--schedule"] and line[3] == f"powerloss:{POINT}", line
    again = run_cli(tmp_path, *line[1:2], "--root", str(tmp_path / "again"), *line[2:])
    assert again.returncode == 1 and "cause: unsynced_write" in again.stdout, again.stdout + again.stderr
    assert not survivors(str(tmp_path / "again"), seconds=0.3)


@pytest.mark.parametrize("schedule", [POINT, f"powerloss:{POINT}"], ids=["kill", "powerloss"])
def test_records_fsynced_are_exactly_once_under_a_kill_and_a_power_loss(
    tmp_path: Path, schedule: str
) -> None:
    rc, text, case = drill(tmp_path, schedule, SERVICE)
    assert rc == 0, text
    (first, again) = charges(case)
    assert first[1] == again[1] and (first[2], again[2]) == ("created", "replayed"), case["ledger"]
    attempts = by_number(case)
    assert attempts[2]["killed_at"] == "during:payments.charge"
    if schedule.startswith("powerloss:"):
        assert attempts[1]["outcome"] == "killed" and attempts[4]["process"] == "driver"
        assert attempts[2]["lost_writes"] == []  # the records were synced: nothing to drop
        assert any("nothing unsynced to drop" in n for n in attempts[2]["notes"])


def test_a_power_loss_at_the_drivers_point_after_the_answer_loses_the_record(tmp_path: Path) -> None:
    """The driver's point kills the machine too: the service answered from records it never
    synced, and after the boot the re-run driver's order is charged again."""
    rc, text, case = drill(tmp_path, "powerloss:driver:after:submit", BUGGY)
    assert rc == 1 and "cause: unsynced_write" in text, text
    attempts = by_number(case)
    assert attempts[1]["killed_at"] == "after:submit"
    assert attempts[2]["killed_at"] == "powerloss:driver:after:submit"
    assert [w["path"] for w in attempts[2]["lost_writes"]] == ["records.json"]


@pytest.mark.slow  # per push: chaos draws a single command's power loss (test_power_loss.py)
def test_chaos_draws_power_losses_in_a_deployment_and_shrinks_one(tmp_path: Path) -> None:
    out = run_cli(
        tmp_path, "chaos", "--faults", "power", "--runs", "2", "--seed", "1", "--discovery-runs", "1",
        "--root", str(tmp_path / "w"), "--report", str(tmp_path / "report"),
        "--serve", BUGGY, "--", *CLIENT, timeout=300,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    plans = [json.loads(line)["schedule"] for line in (tmp_path / "report" / "plans.jsonl").open()]
    assert plans[0].startswith(f"powerloss:{POINT}+"), plans  # a service's kill drawn as a power loss
    assert "duplicate_effect" in text and "[powerloss:" in text.split("shrunk:", 1)[-1], text
    assert not survivors(str(tmp_path / "w"), seconds=0.3)


def test_the_marker_drills_a_deployments_power_loss_and_its_point_reruns_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\n")
    pytester.makepyfile(
        test_inner=f"""
        import pytest

        @pytest.mark.killdrill(points=["powerloss:{POINT}"], serve={{"app": {BUGGY.partition("=")[2]!r}}})
        def test_orders(killdrill, kill_point):
            killdrill.run({CLIENT!r}, kill_point).assert_exactly_once()
        """
    )
    first = pytester.runpytest("-p", "no:cacheprovider")
    first.assert_outcomes(failed=1)
    out = first.stdout.str()
    assert "cause: unsynced_write" in out and "records.json" in out, out
    assert f"--killdrill-point=powerloss:{POINT}" in out, out
    again = pytester.runpytest("-p", "no:cacheprovider", f"--killdrill-point=powerloss:{POINT}")
    again.assert_outcomes(failed=1)
    assert "cause: unsynced_write" in again.stdout.str()


PAGE = Path(__file__).resolve().parents[2] / "docs" / "faults.md"


def doc_lines() -> tuple[str, list[tuple[str, int]]]:
    """The deployment's power-loss block: its variables' line and each command with the exit
    code its comment promises (0: exactly-once, 1: caught)."""
    section = PAGE.read_text(encoding="utf-8").split("### In a deployment", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    out = []
    for line in lines[1:]:
        command, _, promise = line.partition("  #")
        out.append((command.strip(), 0 if "exactly-once" in promise else 1))
    return lines[0], out


@pytest.mark.slow
def test_the_docs_deployment_power_loss_lines_do_what_their_comments_say(tmp_path: Path) -> None:
    variables, lines = doc_lines()
    assert [(c.split()[1], c.split()[3], code) for c, code in lines] == [
        ("run", "app:during:payments.charge", 0),
        ("run", "powerloss:app:during:payments.charge", 1),
        ("run", "powerloss:app:during:payments.charge", 0),
        ("run", "powerloss:driver:after:submit", 1),
        ("chaos", "power", 1),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp_path)  # the failing cases' workdirs are kept in the default root
    for command, code in lines:
        done = subprocess.run(
            ["bash", "-c", f"{variables}\n{command}"],
            capture_output=True,
            text=True,
            env=env,
            cwd=PAGE.parents[1],
            timeout=300,
        )
        assert done.returncode == code, f"{command}\n{done.stdout}{done.stderr}"
        if code == 1 and not command.startswith("killdrill chaos"):  # chaos names the kinds
            assert "unsynced_write" in done.stdout, done.stdout


def test_the_machine_boots_its_services_in_their_start_order(tmp_path: Path) -> None:
    """After the power loss the order service starts again only once its Redis (3 s to listen)
    passed its probe, as at the case's start (``--after api=redis``): started at once, it would
    find no Redis and exit."""
    pytest.importorskip("redis")
    redis = "redis=sh -c \"sleep 3 && exec redis-server --port {port} --save '' --appendonly no\""
    shop = f"api=python {AGENTS / 'deploy' / 'redis_shop.py'} --port {{port}} --redis {{port:redis}}"
    client = [*CLIENT[:3], "http://127.0.0.1:{port:api}/orders", *CLIENT[4:]]
    root = tmp_path / "w"
    out = run_cli(
        tmp_path, "run", "--schedule", "powerloss:api:before:charge", "--discovery-runs", "1",
        "--root", str(root), "--serve", redis, "--serve", shop, "--after", "api=redis", "--", *client,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert re.search(r"\(api\) kill powerloss:api:before:charge: killed by SIGKILL at before:charge", text)
    assert re.search(r"\(redis\) kill powerloss:api:before:charge: killed by SIGKILL at powerloss:", text)
    assert len(re.findall(r"\(redis\) ran free: drained", text)) == 1, text  # booted once, stopped at the end
    assert not survivors(str(root), seconds=0.3)

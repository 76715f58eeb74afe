"""A deployed case's ``Reproduce:`` line gives the case's verdict every time it is run.

The service is a FastAPI + DBOS refund app as DBOS's guide writes one (``DBOS.launch()`` in the
lifespan, served by uvicorn, a ``@DBOS.workflow()`` whose ``@DBOS.step()`` refunds through the
stripe SDK), its driver a client that re-sends its POST on a connection error.  With
``REFUND_BUG=new_id`` each POST starts a new workflow, so after a kill at
``app:before:refund_workflow`` the re-sent POST refunds in a second workflow while DBOS recovers
the first on its queue's next poll: whether that recovered refund ran before the case ended used
to decide the verdict (the driver's answer came first most runs, and the case ended with it).
Now the restarted app's launch runs the workflows it recovers before it answers, and the case
ends once the services finished the work they said they hold."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import run_cli
from tests.leftovers import survivors

DEPLOY = Path(__file__).parent.parent / "agents" / "deploy"
POINT = "app:before:refund_workflow"
APP = f"app=python -m uvicorn refund_app:app --app-dir {DEPLOY} --port {{port}}"
ENV = (
    "--env", "DBOS_SYSTEM_DATABASE_URL=sqlite:///{workdir}/dbos.sqlite",
    "--env", "STRIPE_API_BASE={KILLDRILL_FAKES_URL}",
)  # fmt: skip
CLIENT = ("python", str(DEPLOY / "refund_client.py"), "--url", "http://127.0.0.1:{port}/refunds",
          "--request", "{thread}")  # fmt: skip


def _args(bug: bool) -> list[str]:
    return ["--integration", "dbos", "--http-fakes", "--discovery-runs", "1", "--serve", APP, *ENV,
            *(["--env", "REFUND_BUG=new_id"] if bug else []), "--", *CLIENT]  # fmt: skip


def reproduction(text: str) -> list[str]:
    """The case's ``Reproduce:`` line, as arguments of ``killdrill``."""
    m = re.search(r"Reproduce:\s*\n(?:E)?\s+(killdrill .+?)\s*$", text, re.MULTILINE)  # E: pytest's
    assert m, text
    return shlex.split(m.group(1))[1:]


def verdict(rc: int, text: str) -> tuple[int, str]:
    """The exit status and the case's headline (its verdict and violation kinds)."""
    head = next((ln for ln in text.splitlines() if ln.startswith(("VIOLATED", "EXACTLY-ONCE"))), "")
    return rc, re.sub(r"\] .*: ", "]: ", head) if head.startswith("VIOLATED") else head.split(" ")[0]


def rerun(tmp_path: Path, line: list[str], n: int, tag: str = "again") -> list[tuple[int, str]]:
    """Run the reproduction line ``n`` times (each in its own root): each run's verdict."""
    out = []
    for i in range(n):
        root = tmp_path / f"{tag}{i}"
        res = run_cli(tmp_path, *line[:1], "--root", str(root), *line[1:], timeout=300)
        assert res.returncode in (0, 1), res.stdout + res.stderr
        out.append(verdict(res.returncode, res.stdout + res.stderr))
        assert not survivors(str(root), seconds=0.3)
    return out


def first(tmp_path: Path, bug: bool) -> tuple[int, str]:
    pytest.importorskip("dbos")
    out = run_cli(
        tmp_path, "run", "--schedule", POINT, "--root", str(tmp_path / "w"), *_args(bug), timeout=300
    )
    return out.returncode, out.stdout + out.stderr


def test_the_recovered_refund_is_judged_and_the_reproduction_line_carries_every_option(
    tmp_path: Path,
) -> None:
    rc, text = first(tmp_path, bug=True)
    assert rc == 1 and "VIOLATED [app:before:refund_workflow]" in text, text
    assert text.count("payments.refund") >= 1 and "(app)  key" in text, text  # the recovered refund
    line = reproduction(text)
    for flag in ("--serve", "--integration", "--http-fakes", "--discovery-runs"):
        assert flag in line, line
    assert "REFUND_BUG=new_id" in line and "STRIPE_API_BASE={KILLDRILL_FAKES_URL}" in line, line
    assert rerun(tmp_path, line, 1) == [verdict(rc, text)]


@pytest.mark.slow
@pytest.mark.parametrize("bug", [False, True], ids=["correct", "new_id"])
def test_the_reproduction_line_gives_the_same_verdict_ten_times_and_beside_a_cpu_hog(
    tmp_path: Path, bug: bool
) -> None:
    rc, text = first(tmp_path, bug)
    assert rc == (1 if bug else 0), text
    line = reproduction(text)
    assert rerun(tmp_path, line, 10) == [verdict(rc, text)] * 10
    hog = subprocess.Popen([sys.executable, "-c", "while 1: pass"], env={**os.environ})
    try:
        assert rerun(tmp_path, line, 10, "hogged") == [verdict(rc, text)] * 10
    finally:
        hog.kill()
        hog.wait()


@pytest.mark.slow  # an inner pytest session of a DBOS deployment
def test_the_pytest_route_judges_the_recovered_refund_and_its_line_reproduces_it(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytest.importorskip("dbos")
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\n")
    env = {
        "DBOS_SYSTEM_DATABASE_URL": "sqlite:///{workdir}/dbos.sqlite",
        "STRIPE_API_BASE": "{KILLDRILL_FAKES_URL}",
        "REFUND_BUG": "new_id",
    }
    pytester.makepyfile(
        test_inner=f"""
        import pytest

        @pytest.mark.killdrill(points=[{POINT!r}], serve={{"app": {APP.partition("=")[2]!r}}},
                               env={env!r}, integrations=["dbos"], http_fakes=True)
        def test_refund(killdrill, kill_point):
            killdrill.run({list(CLIENT)!r}, kill_point).assert_exactly_once()
        """
    )
    res = pytester.runpytest("-v")
    res.assert_outcomes(failed=1)
    text = res.stdout.str()
    assert "payments.refund" in text and "(app)  key" in text, text  # the recovered refund, judged
    line = reproduction(text)
    assert "REFUND_BUG=new_id" in line and "--serve" in line and "dbos" in line, line
    assert [v[0] for v in rerun(tmp_path, line, 1)] == [1]

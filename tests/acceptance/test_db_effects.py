"""Effects in the agent's own database (``--effect-table``, ``--effect-db``), drilled for real: an
order agent that charges (keyed) and then writes its receipt row with SQLAlchemy, on SQLite (a
file in the run's workdir) and PostgreSQL (a schema per run, reached through ``PGOPTIONS``).

The correct agent (a unique ``order_id``, ``INSERT ... ON CONFLICT DO NOTHING``) is exactly-once
at every point; the buggy one (a plain ``INSERT``, no constraint) writes a second receipt when a
kill lands after its row: ``duplicate_effect`` on ``db:receipts.insert``, cause ``row_not_unique``.
A receipt written before its charge, the charge then skipped on resume, is a ``missing_effect``
of the charge.
Nothing is left behind in PostgreSQL.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.errors import KilldrillError

AGENT = Path(__file__).parent.parent / "agents" / "db" / "receipts.py"
SQLITE = "sqlite:///{workdir}/app.db"


@pytest.fixture(params=["sqlite", "postgres"])
def effect_db(request: pytest.FixtureRequest) -> str:
    """The URL the drill reads the rows from: SQLite in each run's workdir, or the test server's
    PostgreSQL database (the drill makes a schema per run in it)."""
    if request.param == "sqlite":
        return SQLITE
    url: str = request.getfixturevalue("postgres_server_url")
    return url


def left_schemas(url: str, pid: int | None = None) -> list[str]:
    """The per-run schemas a drill left in the PostgreSQL database at ``url`` (``pid``: only those
    of the harness with that pid, ``kd_fx_PID_*``: other tests' drills share the server)."""
    if not url.startswith("postgresql"):
        return []
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            names = conn.execute(sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'kd_fx_%'"))
            return [n for (n,) in names if pid is None or n.startswith(f"kd_fx_{pid}_")]
    finally:
        engine.dispose()


def left_by_the_dead(url: str, before: Iterable[str]) -> list[str]:
    """The schemas that appeared since ``before`` and outlived their harness (a CLI's, whose pid
    the test does not know): a live harness's are another test's drill, still running."""
    import psutil

    known = set(before)
    return [n for n in left_schemas(url) if n not in known and not psutil.pid_exists(int(n.split("_")[2]))]


def drill(tmp_path: Path, url: str, *bug: str) -> Drill:
    options = DrillOptions(
        root=tmp_path / "w",
        effect_table={"receipts": (("order_id",), None)},
        effect_db=url,
        env={"DATABASE_URL": "{KILLDRILL_EFFECT_DB}"},
    )
    return Drill(["python", str(AGENT), "--order", "{thread}", *bug], options)


def test_the_correct_receipt_is_exactly_once_at_every_point(tmp_path: Path, effect_db: str) -> None:
    with drill(tmp_path, effect_db) as d:
        assert "db:receipts.insert" in {f"{c.provider}.{c.op}" for c in d.discover().baseline.calls}
        result = d.run_all()
    assert result.ok, result.text()
    assert len(result.cases) >= 5
    for case in result.cases:
        assert case.summary["db:receipts"] == {"exactly_once": 1, "duplicated": 0, "lost": 0, "unexpected": 0}
    assert left_schemas(effect_db, pid=os.getpid()) == []  # the drill ran in this process


def test_a_plain_insert_re_run_after_a_kill_is_a_duplicate_receipt(tmp_path: Path, effect_db: str) -> None:
    with drill(tmp_path, effect_db, "--bug", "plain") as d:
        before = d.run_case("before:receipt")
        after = d.run_case("after:receipt")
    assert before.ok, before.text()  # killed before the row: one row in the end
    assert after.kinds == ("duplicate_effect",), after.text()
    (v,) = after.violations
    assert (v.provider, v.op, v.identity) == ("db:receipts", "insert", {"order_id": "{thread}"})
    assert v.cause == "row_not_unique", after.text()
    assert [c.attempt for c in v.calls] == [1, 2], "each row names the attempt that wrote it"
    assert "payments.charge" not in after.text().split("Effects:")[0], "the keyed charge replayed"
    text = after.text()
    assert "attempt 2  row {amount: 4200, charge_id: ch_0001, order_id: {thread}}" in text, text
    assert "unique constraint" in v.fix
    assert left_schemas(effect_db, pid=os.getpid()) == []  # the drill ran in this process


def test_a_receipt_without_its_charge_is_a_missing_charge(tmp_path: Path) -> None:
    with drill(tmp_path, SQLITE, "--bug", "row-first") as d:
        result = d.run_case("after:receipt")
    assert result.kinds == ("missing_effect",), result.text()
    (v,) = result.violations
    assert (v.provider, v.op) == ("payments", "charge"), result.text()
    assert result.summary["db:receipts"]["exactly_once"] == 1, result.text()


def test_a_table_the_clean_run_never_made_is_one_line(tmp_path: Path) -> None:
    options = DrillOptions(
        root=tmp_path / "w",
        effect_table=["reciepts(order_id)"],
        effect_db=SQLITE,
        env={"DATABASE_URL": "{KILLDRILL_EFFECT_DB}"},
    )
    agent = ["python", str(AGENT), "--order", "{thread}"]
    with Drill(agent, options) as d, pytest.raises(KilldrillError) as err:
        d.discover()
    assert "no table 'reciepts'" in str(err.value) and "receipts" in str(err.value), err.value


def test_a_sqlite_database_outside_the_workdir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KilldrillError, match=r"\{workdir\}"):
        Drill(
            ["python", str(AGENT)],
            effect_table=["receipts(order_id)"],
            effect_db=f"sqlite:///{tmp_path}/x.db",
        )


def test_the_pytest_route_spells_the_options_as_marker_keywords(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_effect_db = " + SQLITE + "\n")
    agent = ["python", str(AGENT), "--order", "{thread}", "--bug", "plain"]
    pytester.makepyfile(
        test_receipts=f"""
        import pytest
        AGENT = {agent!r}

        @pytest.mark.killdrill(points=["before:receipt", "after:receipt"],
                               effect_table=["receipts(order_id)"],
                               env={{"DATABASE_URL": "{{KILLDRILL_EFFECT_DB}}"}})
        def test_receipt(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()
        """
    )
    res = pytester.runpytest_subprocess("-rf")
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "duplicate_effect: db:receipts.insert" in out, out
    assert "--effect-table 'receipts(order_id)' --effect-db 'sqlite:///{workdir}/app.db'" in out, out


def test_a_schema_a_killed_drill_left_is_swept_by_the_next(tmp_path: Path, postgres_server_url: str) -> None:
    """A harness SIGKILLed mid-case leaves its run's schema; the next run on the machine drops it
    (its claim has no living owner), and never a schema it did not claim."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil
    import sqlalchemy as sa

    foreign = "kd_fx_4194305_0123456789"  # another machine's drill on the shared server: no claim here
    engine = sa.create_engine(postgres_server_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{foreign}"'))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")} | {"TMPDIR": str(tmp)}
    harness = subprocess.Popen(
        [
            *(sys.executable, "-m", "killdrill", "run", "-s", "before:receipt~60s", "--discovery-runs", "1"),
            *("--effect-table", "receipts(order_id)", "--effect-db", postgres_server_url),
            *("--env", "DATABASE_URL={KILLDRILL_EFFECT_DB}"),
            *("--", "python", str(AGENT), "--order", "{thread}"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def ours() -> list[str]:  # this harness's schemas (other tests' drills share the server)
        return left_schemas(postgres_server_url, pid=harness.pid)

    def in_case() -> bool:  # the case's agent is up (its thread is not a clean run's kd-discovery-*)
        with contextlib.suppress(psutil.Error):
            for proc in psutil.Process(harness.pid).children(recursive=True):
                argv = proc.cmdline()
                if "--order" in argv and not argv[argv.index("--order") + 1].startswith("kd-discovery-"):
                    return True
        return False

    try:
        try:
            deadline = time.monotonic() + 120
            while not (in_case() and ours()):  # its schema is made before its launch
                assert harness.poll() is None and time.monotonic() < deadline, (
                    "the case never made its schema"
                )
                time.sleep(0.1)
        finally:
            harness.send_signal(signal.SIGKILL)
            harness.wait()
        left = ours()
        assert left, "the killed drill left no schema: the test proves nothing"
        clean = subprocess.run(
            [sys.executable, "-m", "killdrill", "clean"], env=env, capture_output=True, text=True, timeout=120
        )
        assert clean.returncode == 0, clean.stderr
        assert all(f"removed PostgreSQL schema {n}" in clean.stdout for n in left), clean.stdout
        assert ours() == [] and foreign in left_schemas(postgres_server_url), clean.stdout
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{foreign}" CASCADE'))
        engine.dispose()

"""Shared fixtures for killdrill's own tests."""

from __future__ import annotations

import os
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """The harnesses the tests start must get SIGINT as a foreground shell gives it, whatever
    started pytest: a background job of a script inherits SIGINT ignored, and a harness that
    ignores it (as the CLI rightly does then) would fail every Ctrl-C test."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # SIGTERM (a CI job cancelled, `kill`) ends the session as Ctrl-C does: the plugin's own
    # handler (pytest_plugin/_signals.py), as in every user's session.


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` runs two workers a core: half of this suite's time is spent waiting on what its
    tests start (Temporal's timers, Celery's redelivery, a killed tree's reaping, a subprocess's
    exit), not on a core. Measured on a quiet 2-core VM: the whole suite with two workers 597 s,
    with three 501 s at 171% CPU; its waiting-heavy part (Temporal, DBOS, fleet, Celery, MCP) with
    two 107.6 s at 103% CPU, with four 81.9 s at 163%. ``-n N`` chooses another number."""
    return 2 * (os.cpu_count() or 1)


@pytest.fixture(scope="session", autouse=True)
def _temporary_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every temporary folder of the session (drills without ``root``, kept workdirs of planted
    bugs, the agents' and harnesses' subprocesses through ``TMPDIR``) lives under pytest's own
    basetemp, which pytest prunes: the suite leaves no ``killdrill-*`` folder in the system's."""
    folder = str(tmp_path_factory.mktemp("tmp", numbered=False))
    before_env, before_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = folder, folder
    try:
        yield
    finally:
        tempfile.tempdir = before_tempdir
        if before_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before_env


if TYPE_CHECKING:
    from killdrill.drill import Drill
    from killdrill.fakes.http import FakesServer

POSTGRES_ENV = "KILLDRILL_TEST_POSTGRES_URL"


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """A SQLAlchemy URL of a reachable PostgreSQL server, or a skip that says how to get one.

    Its database is shared (other tests, other sessions): tests take ``postgres_url``, which
    writes into a private schema instead.

    `.ci/run` sets KILLDRILL_TEST_POSTGRES_URL and KILLDRILL_REQUIRE_POSTGRES=1, which turns
    the skip into a failure there: CI must exercise PostgreSQL.
    """
    url = os.environ.get(POSTGRES_ENV)
    why = None
    if not url:
        why = f"no PostgreSQL: set {POSTGRES_ENV} (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)"
    else:
        try:
            import sqlalchemy as sa

            engine = sa.create_engine(url)
            with engine.connect() as conn:
                conn.execute(sa.text("select 1"))
            engine.dispose()
        except Exception as exc:  # any failure to reach it is a reason to skip, said once
            why = f"PostgreSQL at {url} is not reachable: {exc.__class__.__name__}: {exc}"
    if why:
        if os.environ.get("KILLDRILL_REQUIRE_POSTGRES") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return url  # type: ignore[return-value]


@pytest.fixture
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """A SQLAlchemy URL of the PostgreSQL database whose ``search_path`` is a private schema of
    this test, ``kd_<hex>`` (libpq's ``options=-csearch_path=...``, which psycopg, SQLAlchemy and
    LangGraph's PostgresSaver all pass on): what the test creates lands there, and the schema is
    dropped with all of it after the test, so nothing is left in the shared database."""
    import sqlalchemy as sa

    schema = f"kd_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(postgres_server_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres_server_url else "?"
    try:
        yield f"{postgres_server_url}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


@pytest.fixture
def ledger_file(tmp_path: Path) -> str:
    """A fresh SQLite ledger path of this test (the fakes create it on first use)."""
    return str(tmp_path / "ledger.sqlite")


@pytest.fixture
def server(ledger_file: str) -> Iterator[FakesServer]:
    """The HTTP fakes on 127.0.0.1, recording into ``ledger_file`` under thread ``t``, attempt 1."""
    from killdrill.fakes.http import FakesServer

    with FakesServer(ledger_file, thread="t", attempt=1) as srv:
        yield srv


class SharedDiscoveries:
    """One discovery (two clean runs) per command and discovery options for the whole session.

    Tests about cases, not about discovery itself, drill the same example agents again and
    again; each would pay its own clean runs.  The first test to need one makes it, under a
    file lock in a folder all xdist workers of this session share, and the others read it
    (``Drill.use_discovery``): the same cache the pytest plugin keeps across sessions, fresh here.
    """

    def __init__(self, directory: Path) -> None:
        from killdrill.pytest_plugin._cache import DiscoveryCache

        directory.mkdir(parents=True, exist_ok=True)
        self._cache = DiscoveryCache(directory, token="tests")

    def __call__(self, drill: Drill) -> Drill:
        """``drill`` with the session's discovery of its command and options (made once)."""
        from dataclasses import asdict

        from killdrill.pytest_plugin._cache import Key, discovery_key

        key = discovery_key(drill.command, asdict(drill.options))
        # per launcher too: a forked clean run's timings (no interpreter start) are not a spawned one's
        launcher = drill.options.launcher
        key = Key(f"{key.digest}-{launcher}", {**key.data, "launcher": launcher})
        drill.use_discovery(self._cache.get_or_make(key, drill.discover))
        return drill


@pytest.fixture(scope="session")
def shared_discovery(tmp_path_factory: pytest.TempPathFactory) -> SharedDiscoveries:
    """Call it on a Drill to reuse the session's discovery of that agent (see SharedDiscoveries).

    Not for tests that check discovery itself (its clean runs, warnings or pids they leave).
    """
    base = tmp_path_factory.getbasetemp()
    # under xdist each worker's basetemp is <session root>/popen-gwN: share the session root
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return SharedDiscoveries(root / "shared-discoveries")


@pytest.fixture
def unique_thread() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database URL on each backend (PostgreSQL: ``postgres_url``, a private schema)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'effects.sqlite'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.slow`` (repetitions, measurements) runs only when asked: ``pytest -m slow``."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)

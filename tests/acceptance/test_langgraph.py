"""The LangGraph integration and the LangGraph settlement agent, on the installed LangGraph.

In-process tests record the points the integration emits (``boundary`` replaced by a list);
subprocess tests check the bootstrap a drill uses; drill tests kill the real example agent.
Every attempt pays LangGraph's import (~0.7 s), so drills use a few representative points,
except one full sync drill of the correct agent.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

import killdrill
from killdrill.drill import Drill, DrillOptions
from killdrill.integrations import langgraph as kd_langgraph

pytest.importorskip("langgraph")

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

BOOTSTRAP = os.path.join(os.path.dirname(killdrill.__file__), "integrations", "_bootstrap")
NODES = ("read_usage", "decide_amount", "charge_customer", "write_invoice", "send_receipt")
# The receipt's ref is the idempotency key, which contains the thread: pin what must be stable.
IDENTITY = {"mailbox.send": ["to", "subject", "body"]}


# ------------------------------------------------------------------ in-process: points


class S(TypedDict):
    a: int


@pytest.fixture
def points(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Activate the integration in this process; every point lands in the returned list."""
    seen: list[str] = []
    monkeypatch.setattr(kd_langgraph, "boundary", seen.append)
    monkeypatch.delenv(kd_langgraph.DELAY_ENV, raising=False)
    kd_langgraph.activate()
    yield seen
    kd_langgraph.deactivate()


def two_nodes(*, asynchronous: bool = False, fail_in: str | None = None) -> StateGraph:
    def make(name: str) -> Any:
        def body(s: S) -> S:
            if name == fail_in:
                raise ValueError(f"{name} failed")
            return {"a": s["a"] + 1}

        async def abody(s: S) -> S:
            return body(s)

        return abody if asynchronous else body

    g = StateGraph(S)
    g.add_node("x", make("x"))
    g.add_node("y", make("y"))
    g.add_edge(START, "x")
    g.add_edge("x", "y")
    g.add_edge("y", END)
    return g


def assert_node_order(seen: list[str], node: str, *, committed: bool = True) -> None:
    expected = ["before", "after", "committed"] if committed else ["before", "after"]
    mine = [p.split(":")[0] for p in seen if p.split(":", 1)[1] == node]
    assert mine == expected, f"{node}: {mine} in {seen}"


def saved_checkpoints(saver: Any, thread: str) -> int:
    return len(list(saver.list({"configurable": {"thread_id": thread}})))


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_sync_nodes_emit_before_after_committed(points: list[str], tmp_path: Path, durability: str) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "ck.sqlite")) as saver:
        app = two_nodes().compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": "t"}}
        assert app.invoke({"a": 0}, cfg, durability=durability) == {"a": 2}
        n = saved_checkpoints(saver, "t")
    assert_node_order(points, "x")
    assert_node_order(points, "y")
    assert not any("__" in p for p in points), points  # LangGraph's own tasks are not points
    # One point pair per checkpoint really saved: input, __start__, x, y.
    assert points.count("before:checkpoint") == points.count("committed:checkpoint") == n == 4
    assert points[0] == "before:checkpoint"  # before the first checkpoint (langgraph 8764)


def test_async_nodes_and_async_saver(points: list[str], tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async def main() -> Any:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "ck.sqlite")) as saver:
            app = two_nodes(asynchronous=True).compile(checkpointer=saver)
            return await app.ainvoke({"a": 0}, {"configurable": {"thread_id": "t"}}, durability="sync")

    assert asyncio.run(main()) == {"a": 2}
    assert_node_order(points, "x")
    assert_node_order(points, "y")
    assert points.count("before:checkpoint") == points.count("committed:checkpoint") == 4


def test_functional_api_entrypoint_and_tasks(points: list[str]) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint, task

    @task
    def double(x: int) -> int:
        return 2 * x

    @task
    def inc(x: int) -> int:
        return x + 1

    @entrypoint(checkpointer=InMemorySaver())
    def workflow(x: int) -> int:
        return inc(double(x).result()).result()

    assert workflow.invoke(3, {"configurable": {"thread_id": "t"}}, durability="sync") == 7
    for node in ("workflow", "double", "inc"):
        assert_node_order(points, node)
    assert points.index("after:double") < points.index("before:inc") < points.index("after:workflow")


def test_failed_node_has_no_after_and_no_committed(points: list[str], tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "ck.sqlite")) as saver:
        app = two_nodes(fail_in="y").compile(checkpointer=saver)
        with pytest.raises(ValueError, match="y failed"):
            app.invoke({"a": 0}, {"configurable": {"thread_id": "t"}}, durability="sync")
    assert_node_order(points, "x")
    assert [p for p in points if p.endswith(":y")] == ["before:y"]


def test_exit_durability_commits_nothing_per_step(points: list[str], tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "ck.sqlite")) as saver:
        app = two_nodes().compile(checkpointer=saver)
        app.invoke({"a": 0}, {"configurable": {"thread_id": "t"}}, durability="exit")
    assert_node_order(points, "x", committed=False)
    assert_node_order(points, "y", committed=False)
    assert points[-2:] == ["before:checkpoint", "committed:checkpoint"]
    assert points.count("before:checkpoint") == 1


def test_deactivate_restores_langgraph(points: list[str], tmp_path: Path) -> None:
    kd_langgraph.deactivate()
    with SqliteSaver.from_conn_string(str(tmp_path / "ck.sqlite")) as saver:
        two_nodes().compile(checkpointer=saver).invoke({"a": 0}, {"configurable": {"thread_id": "t"}})
    assert points == []
    assert not kd_langgraph.active()


def test_point_names_follow_the_grammar() -> None:
    from killdrill.points import parse_fault

    assert kd_langgraph.point_name("__start__") is None
    assert kd_langgraph.point_name("charge customer!") == "charge_customer_"
    assert kd_langgraph.point_name("-x") == "_-x"
    for raw in ("charge customer!", "-x", "ünïcode", "a.b/c[0]"):
        name = kd_langgraph.point_name(raw)
        assert parse_fault(f"committed:{name}").point == f"committed:{name}"


# ------------------------------------------------------------------ forced timing


def test_parse_delay() -> None:
    both = kd_langgraph.parse_delay("5ms")
    assert both.writes == both.put == (0.005, 0.005)
    ranged = kd_langgraph.parse_delay("writes=1ms..3ms")
    assert ranged.writes == (0.001, 0.003) and ranged.put is None
    assert all(0.001 <= ranged.seconds("writes") <= 0.003 for _ in range(50))
    assert ranged.seconds("put") == 0.0
    mixed = kd_langgraph.parse_delay("writes=250us, put=0.1s")
    assert mixed.writes == (0.00025, 0.00025) and mixed.put == (0.1, 0.1)
    assert not kd_langgraph.parse_delay("")
    for bad in ("5", "foo=1ms", "3ms..1ms", "writes=fast"):
        with pytest.raises(ValueError, match=kd_langgraph.DELAY_ENV):
            kd_langgraph.parse_delay(bad)


def test_put_delay_slows_every_checkpoint(
    points: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kd_langgraph.DELAY_ENV, "put=60ms")
    kd_langgraph.activate()
    with SqliteSaver.from_conn_string(str(tmp_path / "ck.sqlite")) as saver:
        app = two_nodes().compile(checkpointer=saver)
        start = time.perf_counter()
        app.invoke({"a": 0}, {"configurable": {"thread_id": "t"}}, durability="sync")
        took = time.perf_counter() - start
    assert took >= 4 * 0.060  # four checkpoints, saved one after the other


class SlowWritesSaver(SqliteSaver):
    """A checkpointer whose ``put_writes`` is slow (a remote database): 8039's order, left alone."""

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(0.05)
        super().put_writes(*args, **kwargs)


def assert_writes_before_next_checkpoint(seen: list[str], nodes: tuple[str, ...]) -> None:
    for node in nodes:
        after = seen.index(f"after:{node}")
        assert seen.index(f"committed:{node}") < seen.index("before:checkpoint", after), seen


def test_a_checkpoint_waits_for_the_writes_before_it(points: list[str], tmp_path: Path) -> None:
    """One state per point: a slow ``put_writes`` still lands before the step's checkpoint starts.

    Without it a kill at ``before:checkpoint#N`` found the writes saved in some runs and lost in
    others (the newcomer's ``if snap.next:`` resume passed one run in six).
    """
    with sqlite3.connect(str(tmp_path / "ck.sqlite"), check_same_thread=False) as conn:
        app = two_nodes().compile(checkpointer=SlowWritesSaver(conn))
        app.invoke({"a": 0}, {"configurable": {"thread_id": "t"}}, durability="sync")
    assert_writes_before_next_checkpoint(points, ("x", "y"))


def test_an_async_checkpoint_waits_for_the_writes_before_it(points: list[str], tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    class SlowAsyncWrites(AsyncSqliteSaver):
        async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
            await asyncio.sleep(0.05)
            await super().aput_writes(*args, **kwargs)

    async def main() -> None:
        import aiosqlite

        async with aiosqlite.connect(str(tmp_path / "ck.sqlite")) as conn:
            app = two_nodes(asynchronous=True).compile(checkpointer=SlowAsyncWrites(conn))
            await app.ainvoke({"a": 0}, {"configurable": {"thread_id": "t"}}, durability="sync")

    asyncio.run(main())
    assert_writes_before_next_checkpoint(points, ("x", "y"))


def test_writes_delay_puts_the_checkpoint_first(
    points: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """langgraph 8039 on demand: the step's checkpoint save starts before the node's writes land."""
    monkeypatch.setenv(kd_langgraph.DELAY_ENV, "writes=80ms")
    kd_langgraph.activate()
    with SqliteSaver.from_conn_string(str(tmp_path / "ck.sqlite")) as saver:
        app = two_nodes().compile(checkpointer=saver)
        app.invoke({"a": 0}, {"configurable": {"thread_id": "t"}}, durability="sync")
    after_x = points.index("after:x")
    assert points.index("before:checkpoint", after_x) < points.index("committed:x")


# ------------------------------------------------------------------ bootstrap (subprocesses)


def run_python(
    code: str, tmp_path: Path, *, integrations: str | None, extra_path: str | None = None, **env: str
):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [BOOTSTRAP, extra_path]))
    if integrations is not None:
        environ["KILLDRILL_INTEGRATIONS"] = integrations
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environ,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


USER_SITECUSTOMIZE = "import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = __file__\n"


@pytest.mark.parametrize("integrations", [None, "langgraph"])
def test_bootstrap_chain_loads_the_users_sitecustomize(tmp_path: Path, integrations: str | None) -> None:
    user = tmp_path / "usersite"
    user.mkdir()
    (user / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    probe = """
        import os, sys, sitecustomize
        print(os.environ.get("USER_SITECUSTOMIZE_RAN"))
        print(sitecustomize.__file__)
        roots = ("killdrill", "langgraph", "langchain_core")
        print(sorted(m for m in sys.modules if m.split(".")[0] in roots))
    """
    proc = run_python(probe, tmp_path, integrations=integrations, extra_path=str(user))
    assert proc.returncode == 0, proc.stderr
    ran, module_file, imported = proc.stdout.splitlines()
    assert ran == module_file == str(user / "sitecustomize.py")
    if integrations is None:
        assert imported == "[]"  # nothing of killdrill, let alone LangGraph
    else:
        assert "'killdrill.integrations.langgraph'" in imported
        assert "langgraph'" not in imported.replace("integrations.langgraph'", "")  # LangGraph stays lazy


def test_bootstrap_patches_langgraph_when_the_agent_imports_it(tmp_path: Path) -> None:
    probe = """
        import langgraph.pregel._runner as runner, langgraph.pregel._loop as loop
        for fn in (runner.run_with_retry, runner.arun_with_retry, loop.SyncPregelLoop.__init__):
            print(fn.__code__.co_filename)
    """
    proc = run_python(probe, tmp_path, integrations="langgraph")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [kd_langgraph.__file__] * 3


def test_bootstrap_rejects_a_bad_delay_in_one_line(tmp_path: Path) -> None:
    proc = run_python("print('ran')", tmp_path, integrations="langgraph", **{kd_langgraph.DELAY_ENV: "soon"})
    assert proc.returncode == 2 and "ran" not in proc.stdout
    assert proc.stderr.strip().splitlines() == [
        f"killdrill: integration 'langgraph': {kd_langgraph.DELAY_ENV}='soon': 'soon' is not a duration "
        "like 5ms, 250us or 0.1s"
    ]


def test_bootstrap_names_an_unknown_integration(tmp_path: Path) -> None:
    proc = run_python("print('ran')", tmp_path, integrations="nosuchframework")
    assert proc.returncode == 0 and proc.stdout.strip() == "ran"
    assert "killdrill: cannot load integration 'nosuchframework'" in proc.stderr


# ------------------------------------------------------------------ drills of the example agent


def settlement(*, durability: str = "sync", naive: bool = False, postgres: str | None = None) -> list[str]:
    cmd = ["python", "-m", "killdrill.examples.settlement_langgraph", "--thread", "{thread}"]
    cmd += ["--postgres", postgres] if postgres else ["--db", "{workdir}/ckpt.sqlite"]
    cmd += ["--durability", durability]
    return [*cmd, "--naive"] if naive else cmd


# The fork launcher (one warm template, a fork per attempt) gives the same verdicts as spawning
# fresh processes at a fraction of the cost, so every drill but one uses it; the drain drill
# spawns, which also covers the bootstrap in a fresh interpreter (and the README's LangGraph
# agent is drilled by spawning in tests/acceptance/test_readme_agents.py).
EXAMPLE = "killdrill.examples.settlement_langgraph"
FORK: dict[str, Any] = {"launcher": "fork", "preload": ("langgraph.checkpoint.sqlite", EXAMPLE)}


def drill(tmp_path: Path, command: list[str], **options: Any) -> Drill:
    base = DrillOptions(
        root=tmp_path,
        integrations=("langgraph",),
        timeout=60,
        identity=IDENTITY,
        discovery_runs=1,
    )
    return Drill(command, base, **options)


def expect(d: Drill, cases: dict[str, tuple[str, ...]]) -> None:
    """Run each case; ``()`` means exactly-once, else the violation kinds it must show."""
    for schedule, kinds in cases.items():
        result = d.run_case(schedule)
        assert result.kinds == kinds, f"{schedule}:\n{result.text()}"
        assert result.attempts[0].killed_at == schedule, result.text()


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_naive_graph_duplicates_where_it_must(tmp_path: Path, durability: str) -> None:
    with drill(tmp_path, settlement(durability=durability, naive=True), **FORK) as d:
        catalogue = d.points()
        for node in NODES:
            assert {f"before:{node}", f"after:{node}", f"committed:{node}"} <= set(catalogue)
        cases: dict[str, tuple[str, ...]] = {
            "after:charge_customer": ("duplicate_effect",),  # charged, writes not committed: re-run
            "during:mailbox.send": ("duplicate_effect",),  # delivered, the caller never heard
        }
        if durability == "sync":
            cases["committed:charge_customer"] = ()  # writes durable: resume does not re-run it
        expect(d, cases)


def test_writes_delay_reproduces_langgraph_8039_on_two_cores(tmp_path: Path) -> None:
    """With ``put_writes`` forced late, a kill as the step's checkpoint starts re-runs the charge."""
    env = {kd_langgraph.DELAY_ENV: "writes=40ms"}
    with drill(tmp_path, settlement(naive=True), env=env, **FORK) as naive:
        # Checkpoints: input, __start__, read_usage, decide_amount, charge_customer (the 5th).
        expect(naive, {"before:checkpoint#5": ("duplicate_effect",)})


# (EXAMPLE and FORK are defined above, with the drill helpers.)


def test_correct_graph_passes_every_point_in_sync_mode(tmp_path: Path) -> None:
    repeat = int(os.environ.get("KILLDRILL_LANGGRAPH_REPEAT", "1"))  # KILLDRILL_LANGGRAPH_REPEAT=3: more
    d = drill(tmp_path, settlement(), **FORK)
    catalogue = d.points()
    for node in NODES:
        assert {f"before:{node}", f"after:{node}", f"committed:{node}"} <= set(catalogue)
    assert catalogue.count("before:checkpoint") == 1 and "before:checkpoint#7" in catalogue
    for _ in range(repeat):
        result = d.run_all()
        assert len(result.cases) == len(catalogue)
        failed = [c for c in result.cases if not c.ok]
        assert not failed, "\n\n".join(c.text() for c in failed)


def test_correct_graph_passes_every_point_in_async_mode_repeated(tmp_path: Path) -> None:
    """Async durability makes a named point's resume state nondeterministic: repeat the drill.

    E.g. at ``committed:charge_customer`` the writes are saved against a checkpoint that may
    not be saved yet, so the charge can run again: its key must make the provider replay.
    """
    d = drill(tmp_path, settlement(durability="async"), **FORK)
    result = d.run_all()  # once per push; nightly/test_nightly_drills.py repeats drills
    failed = [c for c in result.cases if not c.ok]
    assert not failed, "\n\n".join(c.text() for c in failed)


def test_drain_on_sigterm_exits_75_and_resumes_exactly_once(tmp_path: Path) -> None:
    d = drill(tmp_path, settlement(), signal="TERM", grace=20)
    result = d.run_case("before:write_invoice")
    first = result.attempts[0]
    assert (first.outcome, first.returncode) == ("drained", 75), result.text()
    assert result.ok, result.text()
    assert [a.outcome for a in result.attempts[1:]] == ["exited"]


@pytest.mark.postgres
def test_postgres_saver_drilled_the_same_way(tmp_path: Path, postgres_url: str) -> None:
    fork = {"launcher": "fork", "preload": ("langgraph.checkpoint.postgres", EXAMPLE)}
    correct = drill(tmp_path / "correct", settlement(postgres=postgres_url), **fork)
    expect(
        correct,
        {"after:charge_customer": (), "during:mailbox.send": (), "before:checkpoint#5": ()},
    )
    naive = drill(tmp_path / "naive", settlement(postgres=postgres_url, naive=True), **fork)
    expect(naive, {"after:charge_customer": ("duplicate_effect",)})


def test_example_resumes_instead_of_resubmitting(tmp_path: Path) -> None:
    """Run to the end, then again on the same thread: nothing more happens (no second charge)."""
    from killdrill.ledger import Ledger

    ledger = str(tmp_path / "ledger.sqlite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env.update(KILLDRILL_LEDGER=ledger, KILLDRILL_THREAD="t1")
    cmd = [sys.executable, "-m", "killdrill.examples.settlement_langgraph", "--thread", "t1"]
    cmd += ["--db", str(tmp_path / "ck.sqlite")]
    outs = [subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60) for _ in range(2)]
    assert [p.returncode for p in outs] == [0, 0], outs[0].stderr + outs[1].stderr
    assert outs[0].stdout == outs[1].stdout
    with sqlite3.connect(str(tmp_path / "ck.sqlite")) as conn:
        assert conn.execute("select count(distinct thread_id) from checkpoints").fetchone() == (1,)
    assert [c.outcome for c in Ledger(ledger, "t1").calls("payments")] == ["created"]

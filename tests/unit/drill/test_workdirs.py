"""How a case reads its ledger: once after each attempt, never again for the verdict,
and a ledger the agent deleted is named as such."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions, workdirs
from killdrill.drill.workdirs import RunContext, Workdirs
from killdrill.examples import SETTLEMENT
from killdrill.ledger import Ledger
from killdrill.records import LedgerSnapshot
from killdrill.verdict.baselines import ledger_break


def test_a_case_reads_its_ledger_once_per_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: after each attempt, and once more for the verdict (a third of a 1,000-effect
    case's harness time).  The verdict judges the read that followed the last attempt."""
    drill = Drill(list(SETTLEMENT), DrillOptions(root=tmp_path, launcher="fork", keep=True))
    drill.discover()
    reads: list[str] = []
    real = Ledger.snapshot

    def counted(self: Ledger, since: LedgerSnapshot | None = None, **kw: Any) -> LedgerSnapshot:
        reads.append(self.thread)
        return real(self, since, **kw)

    monkeypatch.setattr(Ledger, "snapshot", counted)
    case = drill.run_case("during:payments.charge")
    assert case.ok, case.text()
    assert len(case.attempts) == 2 and len(reads) == 2, (case.attempts, reads)
    assert case.ledger is not None and case.summary["payments"]["exactly_once"] == 1
    monkeypatch.undo()
    # what it judged is what a fresh read gives, normalised like any snapshot
    fresh = Workdirs(tmp_path, None).snapshot(RunContext(Path(case.workdir), case.thread))
    assert case.ledger == fresh and len(fresh.calls) >= 3


def test_a_ledger_the_agent_deleted_is_a_marker_gone(tmp_path: Path) -> None:
    workdirs = Workdirs(tmp_path, None)
    run = RunContext(workdirs.new("case"), "t-1")
    workdirs.mark(run, "m")
    before, marked = workdirs.snapshot_and_mark(run, "m")
    assert marked
    for path in (run.state).glob("ledger.sqlite*"):
        path.unlink()
    after, marked = workdirs.snapshot_and_mark(run, "m")
    assert (after, marked) == (LedgerSnapshot(), False)
    assert "marker is gone" in ledger_break(before, after, marked)
    assert not (run.state / "ledger.sqlite").exists()  # the read made no file


def test_two_drills_on_one_root_keep_each_others_workdirs(tmp_path: Path) -> None:
    """Before, a workdir name already in the root was removed and made anew: a second drill on
    the same root (the detection corpus ran two at once) deleted the first's running cases."""
    first, second = Workdirs(tmp_path, None), Workdirs(tmp_path, None)
    mine = first.new("before:payout")
    (mine / "evidence").write_text("kept")
    theirs = second.new("before:payout")
    assert theirs != mine and (mine / "evidence").read_text() == "kept"
    assert (theirs / ".killdrill").is_dir() and theirs.name.startswith("002-")


def test_a_case_ledger_starts_as_the_blank_and_holds_only_its_own_marker(tmp_path: Path) -> None:
    """The second case's ledger is a copy of the first's before its marker (making the schema
    would be 3 ms of every case): a ledger like any other, which the agent writes durably, and
    nothing of the first case's thread or marker in it."""
    workdirs = Workdirs(tmp_path, None)
    first, second = (RunContext(workdirs.new(f"case-{i}"), f"t-{i}") for i in (1, 2))
    workdirs.mark(first, "first-mark")
    _charge(Ledger(workdirs.ledger_url(first.workdir), first.thread), "k1")
    workdirs.mark(second, "second-mark")
    url = workdirs.ledger_url(second.workdir)
    assert not Path(f"{url}-wal").exists()  # the marker's write was checkpointed into the file
    raw = Path(url).read_bytes()
    assert b"first-mark" not in raw and b"t-1" not in raw and b"k1" not in raw
    assert workdirs.snapshot_and_mark(second, "second-mark")[1]
    assert not workdirs.snapshot_and_mark(second, "first-mark")[1]
    agent = Ledger(url, second.thread)  # what an attempt opens: a durable writer
    _charge(agent, "k2")
    assert [c.key for c in agent.calls()] == ["k2"] and agent.db.durable  # type: ignore[attr-defined]
    agent.close()
    assert [c.key for c in workdirs.snapshot(first).calls] == ["k1"]


def _charge(ledger: Ledger, key: str) -> None:
    with ledger.transaction() as tx:
        tx.record("payments", "charge", key, {"amount": 1}, "created", None, 1, 1)


def test_a_discarded_workdir_is_gone_at_once_and_deleted_before_close(tmp_path: Path) -> None:
    """A passing case's workdir leaves the case's critical path: its path is free when
    ``discard`` returns, its files are deleted in the background, and ``close`` waits for that."""
    workdirs = Workdirs(None, None)
    wd = workdirs.new("case")
    (wd / "big").write_bytes(b"x" * 100_000)
    workdirs.discard(wd)
    assert not wd.exists()
    root = workdirs.root
    workdirs.close()
    assert not root.exists()  # nothing was kept: the root we made is removed, the trash with it


def test_the_interpreters_exit_waits_for_discarded_workdirs(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from killdrill.drill.workdirs import Workdirs\n"
        "w = Workdirs(sys.argv[1], None); wd = w.new('case'); (wd / 'f').write_bytes(b'x' * 10000)\n"
        "w.discard(wd)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)
    assert list(tmp_path.iterdir()) == []


def _kill_harness_at(script: str, line: str, root: Path, tmp: Path) -> None:
    """Run a harness ``script`` (given ``root``, with ``tmp`` as its system temporary folder) and
    SIGKILL it once it prints ``line``."""
    import subprocess
    import sys

    tmp.mkdir()
    harness = subprocess.Popen(
        [sys.executable, "-c", script, str(root)],
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert harness.stdout is not None and harness.stdout.readline() == f"{line}\n"
    finally:
        harness.kill()
        harness.wait()
        if harness.stdout is not None:
            harness.stdout.close()


def _sweep_with_temp(tmp: Path) -> list[str]:
    """What the next run's sweep says it removed, ``tmp`` its system temporary folder."""
    from killdrill.drill import sweep

    with pytest.MonkeyPatch.context() as m:
        m.setattr(workdirs.tempfile, "tempdir", str(tmp))
        return sweep.sweep()


KILLED_MID_DELETION = """
import sys, time
from killdrill.drill import workdirs
workdirs._REMOVER._run = lambda: time.sleep(600)  # the deletion never comes: killed before it
w = workdirs.Workdirs(sys.argv[1], None)
w.discard(w.new("case"))
print("discarded", flush=True)
time.sleep(600)
"""


def test_a_discarded_workdir_a_killed_harness_left_in_a_given_root_is_swept(tmp_path: Path) -> None:
    """The ``.removing-*`` folder of a harness SIGKILLed mid-deletion, in a ``--root`` of the
    user's (a made root is swept whole): the next run removes it, and leaves the root."""
    root, tmp = tmp_path / "root", tmp_path / "tmp"
    _kill_harness_at(KILLED_MID_DELETION, "discarded", root, tmp)
    [trash] = root.iterdir()
    assert trash.name.startswith(".removing-")
    said = _sweep_with_temp(tmp)
    assert said == [f"folder {trash}"] and list(root.iterdir()) == [] and list(tmp.iterdir()) == []


def test_cases_started_at_once_find_the_root_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cases of ``--killdrill-workers`` ask a new drill's root for their workdirs together: the
    root is set only once it exists, so no case makes its workdir in a folder not made yet
    (FileNotFoundError, were it set first)."""
    import threading
    import time

    root = tmp_path / "a" / "killdrill"
    real = Path.mkdir

    def slow(self: Path, *args: Any, **kwargs: Any) -> None:
        if self == root:
            time.sleep(0.3)  # the thread that makes the root loses the core here
        real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", slow)
    workdirs = Workdirs(root, None)
    made: list[Path] = []
    errors: list[BaseException] = []

    def one(label: str) -> None:
        try:
            made.append(workdirs.new(label))
        except BaseException as exc:  # the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(f"case-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join()
    assert errors == []
    assert len(made) == 4
    assert all(p.parent == root and p.is_dir() for p in made)


def _existing(tmp_path: Path) -> Any:
    from killdrill.fakes.existing import load_existing

    path = tmp_path / "existing.json"
    path.write_text('{"stripe": {"customers": [{"id": "cus_ana", "email": "ana@example.com"}]}}')
    return load_existing(str(path))


@pytest.mark.parametrize("shared", [False, True], ids=["sqlite-per-case", "shared-postgres"])
def test_existing_objects_are_in_every_run_and_no_call(tmp_path: Path, shared: bool, request: Any) -> None:
    url = request.getfixturevalue("postgres_url") if shared else None
    workdirs = Workdirs(tmp_path / "r", url, _existing(tmp_path))
    case = RunContext(workdirs.new("case"), "kd-case")
    workdirs.mark(case, "m")  # a case: before its first attempt
    clean = RunContext(workdirs.new("clean"), "kd-discovery-1")
    with workdirs.private_ledger(clean.workdir):  # a clean run (its own SQLite ledger)
        workdirs.plant(clean)
        with workdirs.ledger(clean) as ledger:
            assert ledger.effect("payments", "cus_ana") == {
                "email": "ana@example.com",
                "id": "cus_ana",
                "object": "customer",
            }
    with workdirs.ledger(case) as ledger:
        assert ledger.effect("payments", "cus_ana") is not None and ledger.calls() == []
    for run in (case, clean):
        workdirs.discard(run.workdir)
    workdirs.close()


def test_a_relative_root_gives_absolute_workdirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process started in another folder (``--cwd``, a service that changes directory) is given
    ``{workdir}`` and ``KILLDRILL_WORKDIR``: a path relative to the harness's folder would name
    another place there."""
    monkeypatch.chdir(tmp_path)
    workdirs = Workdirs("drills", None)
    wd = workdirs.new("case")
    assert wd.is_absolute() and wd.parent == tmp_path / "drills"


def test_a_runs_temp_dir_is_in_its_workdir_or_a_short_claimed_folder_gone_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the workdir while a socket's path under it fits; from a deep root, in a short folder
    of the drill's, removed with the run's workdir and, whole, at close."""
    import tempfile

    system = tmp_path / "t"
    system.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system))
    near = Workdirs(system / "r", None)
    wd = near.new("case")
    monkeypatch.setattr(workdirs, "TMP_PATH_LIMIT", len(str(wd)) + 20)  # pytest's own folder is deep
    env = near.temp_env(wd)
    assert set(env) == {"TMPDIR", "TMP", "TEMP"} and env["TMPDIR"] == str(wd / ".killdrill" / "tmp")
    assert Path(env["TMPDIR"]).is_dir()
    deep = Workdirs(tmp_path / ("deep-" * 12), None)
    wd = deep.new("case")
    tmp = Path(deep.temp_env(wd)["TMPDIR"])
    assert tmp.parent.parent == system and tmp.parent.name.startswith("killdrill-tmp-")
    assert len(str(tmp)) < len(str(wd))
    (tmp / "pymp-x").mkdir()
    deep.discard(wd)
    deep.close()
    assert not tmp.exists() and not tmp.parent.exists()


def test_the_users_tmpdir_wins(tmp_path: Path) -> None:
    drill = Drill(list(SETTLEMENT), DrillOptions(root=tmp_path, env={"TMPDIR": "{workdir}/mine"}))
    run = RunContext(drill.workdirs.new("case"), "t")
    env = drill.setup.env(run)
    assert env["TMPDIR"] == f"{run.workdir}/mine" and env["TEMP"] != env["TMPDIR"]
    template = drill.setup.env(RunContext(drill.workdirs.root, "kd-template"))
    assert "TEMP" not in template or template["TEMP"] == os.environ.get("TEMP")  # each fork: its run's
    assert not (drill.workdirs.root / ".killdrill").exists()
    drill.close()


def test_a_runs_temp_dir_too_long_in_its_workdir_is_in_the_roots_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long case label makes the workdir's path too long for a socket under it; the root's
    ``.killdrill-tmp`` is short enough: the run's temporary folder stays inside the drill's root."""
    near = Workdirs(tmp_path / "r", None)
    monkeypatch.setattr(workdirs, "TMP_PATH_LIMIT", len(str(near.root / workdirs.ROOT_TEMP / "1000000")))
    wd = near.new("before:" + "x" * 80)
    tmp = Path(near.temp_env(wd)["TMPDIR"])
    assert tmp.parent == near.root / workdirs.ROOT_TEMP and tmp.is_dir()
    near.discard(wd)
    near.close()
    assert not (near.root / workdirs.ROOT_TEMP).exists()


KILLED_WITH_A_ROOT_TEMP = """
import sys, time
from pathlib import Path
from killdrill.drill import workdirs
workdirs.TMP_PATH_LIMIT = len(str(Path(sys.argv[1]) / workdirs.ROOT_TEMP / "1000000"))
w = workdirs.Workdirs(sys.argv[1], None)
wd = w.new("before:" + "x" * 80)
(Path(w.temp_env(wd)["TMPDIR"]) / "pymp-left").mkdir()
print("made", flush=True)
time.sleep(600)
"""


def test_the_roots_temp_folder_a_killed_harness_left_in_a_given_root_is_swept(tmp_path: Path) -> None:
    """A harness SIGKILLed while its runs' temporary folders were in a ``--root`` of the user's
    (``.killdrill-tmp``, for workdir paths too long for a socket): the next run's sweep removes it,
    as it removes a root it made (both are claimed)."""
    root, tmp = tmp_path / "root", tmp_path / "tmp"
    _kill_harness_at(KILLED_WITH_A_ROOT_TEMP, "made", root, tmp)
    assert (root / workdirs.ROOT_TEMP).is_dir()
    said = _sweep_with_temp(tmp)
    assert f"folder {root / workdirs.ROOT_TEMP}" in said, said
    assert not (root / workdirs.ROOT_TEMP).exists()

"""The lossy mount on a real FUSE file system: a SIGKILL loses nothing, a crash loses exactly what
was not synced (a JSON checkpoint replaced without fsync, SQLite's WAL under synchronous=NORMAL),
and a mount never outlives the harness that made it."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from killdrill.drill import sweep
from killdrill.errors import HarnessError
from killdrill.faults.lossy_mount import LossyMount, is_mounted, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[LossyMount]:
    backing, mountpoint = tmp_path / "backing", tmp_path / "work"
    backing.mkdir()
    (backing / ".killdrill").mkdir()
    mountpoint.mkdir()
    lossy = LossyMount(backing, mountpoint, link=".killdrill", log=tmp_path / "fs.log")
    lossy.start()
    yield lossy
    lossy.close()
    assert not is_mounted(mountpoint)


def killed(code: str) -> None:
    """Run ``code`` in a process that SIGKILLs itself at its end (no close, no exit handler)."""
    body = textwrap.dedent(code) + "\nimport os, signal; os.kill(os.getpid(), signal.SIGKILL)\n"
    done = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr


JSON_CHECKPOINT = """
import json, os
path = {path!r}
with open(path + ".tmp", "w") as f:
    json.dump({{"step": 2}}, f)
    if {sync}:
        f.flush(); os.fsync(f.fileno())
os.replace(path + ".tmp", path)
if {sync}:
    fd = os.open(os.path.dirname(path), os.O_RDONLY); os.fsync(fd); os.close(fd)
"""


@pytest.mark.parametrize("sync", [False, True])
def test_a_json_checkpoint_survives_a_kill_and_survives_a_crash_only_when_fsynced(
    mount: LossyMount, sync: bool
) -> None:
    path = mount.mountpoint / "checkpoint.json"
    (mount.backing / "checkpoint.json").write_text('{"step": 1}')  # synced before the test
    killed(JSON_CHECKPOINT.format(path=str(path), sync=sync))
    assert json.loads(path.read_text()) == {"step": 2}  # a SIGKILL alone loses nothing
    report = mount.crash()
    mount.start()
    if sync:
        assert json.loads(path.read_text()) == {"step": 2}
        assert [d["path"] for d in report["dropped"]] == []
    else:
        assert path.read_text() == ""  # the replace survived, its data did not
        (dropped,) = report["dropped"]
        assert dropped == {
            "path": "checkpoint.json",
            "size_seen": 11,
            "size_kept": 0,
            "unsynced_bytes": 11,
            "ever_synced": False,
        }


SQLITE_CHECKPOINT = """
import sqlite3
c = sqlite3.connect({path!r}, isolation_level=None)
c.execute("PRAGMA journal_mode=WAL")
c.execute("PRAGMA synchronous={mode}")
c.execute("INSERT INTO steps VALUES ({n})")
"""


@pytest.mark.parametrize("mode", ["NORMAL", "FULL"])
def test_sqlite_in_wal_mode_loses_its_last_commit_under_normal_and_keeps_it_under_full(
    mount: LossyMount, mode: str
) -> None:
    path = mount.mountpoint / "state.db"
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE steps (n INTEGER)")
    setup.commit()
    setup.close()  # the last connection's close checkpoints: synced under either mode
    mount.crash()
    mount.start()  # a new file system process: its count of fsyncs starts at zero
    for n in (1, 2):  # a connection never closed (no checkpoint of the WAL into the database)
        killed(SQLITE_CHECKPOINT.format(path=str(path), mode=mode, n=n))
    report = mount.crash()
    mount.start()
    with sqlite3.connect(path) as db:
        rows = [n for (n,) in db.execute("SELECT n FROM steps")]
    lost = {d["path"] for d in report["dropped"]} - {"state.db-shm"}  # the index SQLite rebuilds
    if mode == "FULL":
        assert rows == [1, 2] and lost == set()
    else:
        assert rows == [] and lost == {"state.db-wal"}
    # SQLite's own syscalls: under FULL each commit fsyncs the WAL; under NORMAL only the new
    # WAL's header is (once), never a commit's frames
    assert report["fsyncs"].get("/state.db-wal", 0) == (3 if mode == "FULL" else 1)


def test_the_harness_folder_is_never_lossy(mount: LossyMount) -> None:
    killed(f"open({str(mount.mountpoint / '.killdrill' / 'ledger')!r}, 'w').write('evidence')")
    mount.crash()
    assert (mount.backing / ".killdrill" / "ledger").read_text() == "evidence"


HARNESS = """
import sys, time
from pathlib import Path
from killdrill.faults.lossy_mount import LossyMount
LossyMount(Path(sys.argv[1]), Path(sys.argv[2])).start()
print("mounted", flush=True)
time.sleep(60)
"""


def test_a_mount_goes_when_the_harness_that_made_it_is_killed(tmp_path: Path) -> None:
    backing, mountpoint = tmp_path / "b", tmp_path / "m"
    backing.mkdir()
    mountpoint.mkdir()
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(backing), str(mountpoint)], stdout=subprocess.PIPE, text=True
    )
    assert harness.stdout is not None and harness.stdout.readline() == "mounted\n"
    assert is_mounted(mountpoint)
    harness.kill()
    harness.wait()
    harness.stdout.close()
    deadline = time.monotonic() + 10
    while is_mounted(mountpoint) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not is_mounted(mountpoint)


def test_the_sweep_unmounts_a_claimed_mount(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "m").mkdir()
    lossy = LossyMount(tmp_path / "b", tmp_path / "m")
    lossy.start()
    try:
        sweep.REMOVERS["fuse-mount"]({"kind": "fuse-mount", "path": str(tmp_path / "m")})
        assert not is_mounted(tmp_path / "m")
    finally:
        lossy.close()


def test_closing_the_mount_writes_back_what_no_crash_dropped(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "m").mkdir()
    lossy = LossyMount(tmp_path / "b", tmp_path / "m")
    lossy.start()
    killed(f"open({str(tmp_path / 'm' / 'out.json')!r}, 'w').write('{{}}')")
    assert (tmp_path / "b" / "out.json").read_text() == ""
    lossy.close()
    assert (tmp_path / "b" / "out.json").read_text() == "{}"


def test_a_file_system_that_died_under_a_case_is_the_harness_s_failure(mount: LossyMount) -> None:
    proc = mount._proc
    assert proc is not None
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with pytest.raises(HarnessError, match="ended"):
        mount.check_alive()
    assert not is_mounted(mount.mountpoint)


def test_the_sweep_gives_a_workdir_its_files_back_after_its_harness_died(tmp_path: Path) -> None:
    workdir, backing = tmp_path / "001-case", tmp_path / ".killdrill-lossy-001-case"
    workdir.mkdir()
    (workdir / "checkpoint.json").write_text("{}")
    workdir.rename(backing)
    workdir.mkdir()
    lossy = LossyMount(backing, workdir, moved=True)
    lossy.start()
    try:
        claim = {"kind": "fuse-mount", "path": str(workdir), "backing": str(backing)}
        sweep.REMOVERS["fuse-mount"](claim)
        assert not is_mounted(workdir) and not backing.exists()
        assert (workdir / "checkpoint.json").read_text() == "{}"
    finally:
        lossy.close()

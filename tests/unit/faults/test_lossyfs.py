"""The lossy file system's cache, driven in-process (no FUSE): what survives a crash is exactly
what was synced, and every reader sees every write until then."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from killdrill.faults._lossyfs import PAGE, LossyOps


@pytest.fixture
def ops(tmp_path: Path) -> LossyOps:
    (tmp_path / ".killdrill").mkdir()
    return LossyOps(str(tmp_path), ".killdrill")


def create(ops: LossyOps, path: str) -> int:
    return ops.create(path, 0o644, os.O_RDWR)


def test_a_write_not_synced_is_seen_by_readers_and_not_in_the_backing_file(
    ops: LossyOps, tmp_path: Path
) -> None:
    fd = create(ops, "/c.json")
    assert ops.write("/c.json", b'{"step": 1}', 0, fd) == 11
    other = ops.open("/c.json", os.O_RDONLY)
    assert ops.read("/c.json", 100, 0, other) == b'{"step": 1}'
    assert ops.getattr("/c.json")["st_size"] == 11
    assert (tmp_path / "c.json").read_bytes() == b""  # the name is durable, the data is not
    report = ops.report()
    assert report["dropped"] == [
        {"path": "c.json", "size_seen": 11, "size_kept": 0, "unsynced_bytes": 11, "ever_synced": False}
    ]


def test_fsync_writes_the_files_pages_and_size_and_nothing_is_left_to_drop(
    ops: LossyOps, tmp_path: Path
) -> None:
    fd = create(ops, "/c.json")
    ops.write("/c.json", b"x" * (PAGE + 10), 0, fd)
    ops.fsync("/c.json", 0, fd)
    assert (tmp_path / "c.json").read_bytes() == b"x" * (PAGE + 10)
    assert ops.report() == {"dropped": [], "fsyncs": {"/c.json": 1}}


def test_an_overwrite_in_place_not_synced_leaves_the_old_bytes_in_the_backing_file(
    ops: LossyOps, tmp_path: Path
) -> None:
    fd = create(ops, "/log")
    ops.write("/log", b"a" * 10, 0, fd)
    ops.fsync("/log", 0, fd)
    ops.write("/log", b"BB", 4, fd)
    ops.write("/log", b"tail", 10, fd)
    assert ops.read("/log", 100, 0, fd) == b"aaaaBBaaaatail"
    assert (tmp_path / "log").read_bytes() == b"a" * 10
    (dropped,) = ops.report()["dropped"]
    assert (dropped["size_seen"], dropped["size_kept"], dropped["ever_synced"]) == (14, 10, True)


def test_a_truncate_then_a_shorter_write_reads_zeros_past_it_and_syncs_the_same(
    ops: LossyOps, tmp_path: Path
) -> None:
    fd = create(ops, "/f")
    ops.write("/f", b"y" * (3 * PAGE), 0, fd)
    ops.fsync("/f", 0, fd)
    ops.truncate("/f", 5, fd)
    ops.truncate("/f", 2 * PAGE, fd)  # grown again: the old bytes must not come back
    seen = ops.read("/f", 3 * PAGE, 0, fd)
    assert seen == b"y" * 5 + bytes(2 * PAGE - 5)
    assert (tmp_path / "f").read_bytes() == b"y" * (3 * PAGE)  # unsynced: the backing is untouched
    ops.fsync("/f", 1, fd)
    assert (tmp_path / "f").read_bytes() == seen


def test_an_open_with_o_trunc_is_a_cached_truncate(ops: LossyOps, tmp_path: Path) -> None:
    fd = create(ops, "/c")
    ops.write("/c", b"old", 0, fd)
    ops.fsync("/c", 0, fd)
    again = ops.open("/c", os.O_WRONLY | os.O_TRUNC)
    assert ops.getattr("/c")["st_size"] == 0
    ops.write("/c", b"new!", 0, again)
    assert ops.read("/c", 10, 0, fd) == b"new!"
    assert (tmp_path / "c").read_bytes() == b"old"


def test_a_rename_is_durable_at_once_and_carries_the_unsynced_data_with_the_file(
    ops: LossyOps, tmp_path: Path
) -> None:
    old = create(ops, "/c.json")
    ops.write("/c.json", b"v1", 0, old)
    ops.fsync("/c.json", 0, old)
    tmp = create(ops, "/c.json.tmp")
    ops.write("/c.json.tmp", b"v2", 0, tmp)
    ops.rename("/c.json.tmp", "/c.json")  # os.replace, no fsync of the file: the ext4 zero-length file
    assert ops.read("/c.json", 10, 0, ops.open("/c.json", os.O_RDONLY)) == b"v2"
    assert sorted(os.listdir(tmp_path)) == [".killdrill", "c.json"]
    assert (tmp_path / "c.json").read_bytes() == b""
    assert [d["path"] for d in ops.report()["dropped"]] == ["c.json"]


def test_a_new_file_on_a_reused_inode_does_not_inherit_the_old_files_cache(
    ops: LossyOps, tmp_path: Path
) -> None:
    for _ in range(5):
        fd = create(ops, "/t")
        assert ops.getattr("/t")["st_size"] == 0
        ops.write("/t", b"data", 0, fd)
        ops.release("/t", fd)
        ops.unlink("/t")
    assert ops.report()["dropped"] == []


def test_the_harness_folder_is_a_symlink_to_the_backing_and_cannot_be_removed(
    ops: LossyOps, tmp_path: Path
) -> None:
    attrs = ops.getattr("/.killdrill")
    assert attrs["st_mode"] & 0o170000 == 0o120000
    assert ops.readlink("/.killdrill") == str(tmp_path.resolve() / ".killdrill")
    with pytest.raises(PermissionError):
        ops.rename("/.killdrill", "/elsewhere")

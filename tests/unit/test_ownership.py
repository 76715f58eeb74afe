"""Claims, their release, the kept list's bound: ``killdrill.ownership`` and ``drill.sweep``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from killdrill import ownership
from killdrill.drill import sweep


@pytest.fixture(autouse=True)
def _own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield


def _root(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"killdrill-{name}"
    path.mkdir()
    (path / "001-case").mkdir()
    return path


def test_a_living_owners_claims_are_never_swept(tmp_path: Path) -> None:
    root = _root(tmp_path, "mine")
    cid = ownership.claim(ownership.FOLDER, path=str(root))
    assert sweep.sweep() == [] and root.is_dir()  # this process holds its record's lock
    ownership.release(cid)


def test_the_kept_list_is_bounded_oldest_first(tmp_path: Path) -> None:
    roots = [_root(tmp_path, f"kept{i}") for i in range(4)]
    for root in roots:
        ownership.keep(root)
    said = sweep.prune_kept(2)
    assert said == [f"kept folder {roots[0]}", f"kept folder {roots[1]}"]
    assert [r.is_dir() for r in roots] == [False, False, True, True]
    assert [e["path"] for e in ownership.kept()] == [str(r) for r in roots[2:]]


def test_every_sweep_bounds_the_kept_list(tmp_path: Path) -> None:
    """Every run sweeps: kept evidence never grows past the documented bound, whoever clears it."""
    roots = [_root(tmp_path, f"kept{i:02}") for i in range(ownership.KEEP_LIMIT + 1)]
    for root in roots:
        ownership.keep(root)
    assert sweep.sweep() == [f"kept folder {roots[0]}"]
    assert [r.is_dir() for r in roots] == [False] + [True] * ownership.KEEP_LIMIT


def test_a_sweeper_removes_only_what_killdrill_names(tmp_path: Path) -> None:
    mine = tmp_path / "important"
    mine.mkdir()
    sweep._folder({"path": str(mine)})  # a record naming the user's folder: left alone
    sweep._folder({"path": "relative/killdrill-x"})
    assert mine.is_dir()


def test_nothing_is_written_until_a_claim(tmp_path: Path) -> None:
    assert ownership.kept() == [] and sweep.sweep() == []
    assert not ownership.registry_dir().exists() and os.listdir(tmp_path) == []

"""Power loss as the drill sees it: the grammar, chaos's draw, the one-line refusal where FUSE is
missing, the attempt's record of what was lost, and the cause the verdict names."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from killdrill.errors import UsageError
from killdrill.faults import lossy_mount, powerloss
from killdrill.options import DrillOptions
from killdrill.points import POWER_LOSS, Fault, ScheduleError, parse_fault, parse_schedule
from killdrill.records import CREATED, DUPLICATE_EFFECT, EXITED, KILLED, Attempt, Call, LedgerSnapshot
from killdrill.verdict import judge
from killdrill.verdict.diagnosis import diagnose


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("powerloss:after:save", Fault(point="after:save", action=POWER_LOSS)),
        (
            "powerloss:during:payments.charge#2",
            Fault(point="during:payments.charge", occurrence=2, action=POWER_LOSS),
        ),
        ("powerloss:after:save+3ms", Fault(point="after:save", delay_ms=3.0, action=POWER_LOSS)),
        ("powerloss:offset:40ms", Fault(offset_ms=40.0, action=POWER_LOSS)),
    ],
)
def test_a_power_loss_is_a_kill_at_a_point_or_time_and_prints_back(text: str, fault: Fault) -> None:
    assert parse_fault(text) == fault
    assert str(fault) == text and fault.is_kill


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("powerloss:pause:after:x", "with a point or a time as TRIGGER"),
        ("powerloss:after:x~3s", "with a point or a time as TRIGGER"),
        ("powerloss:drop:payments.charge", "with a point or a time as TRIGGER"),
        ("powerloss:befor:x", "after powerloss: unknown kind"),
    ],
)
def test_a_power_loss_without_a_kills_trigger_is_refused_in_one_line(text: str, why: str) -> None:
    with pytest.raises(ScheduleError) as err:
        parse_fault(text)
    assert err.value.text == text and why in str(err.value)


def test_chaos_turns_the_first_plain_kill_of_one_run_in_two_into_a_power_loss() -> None:
    sched = parse_schedule("pause:before:a,after:b,before:c")
    drawn = [powerloss.with_power_loss(sched, 7, i) for i in range(40)]
    changed = [d for d in drawn if d != sched]
    assert 10 < len(changed) < 30
    assert all(str(d) == "pause:before:a,powerloss:after:b,before:c" for d in changed)
    assert drawn == [powerloss.with_power_loss(sched, 7, i) for i in range(40)]  # the seed decides


def test_chaos_draws_a_power_loss_at_a_deployments_named_process_too() -> None:
    """In a deployment the machine runs every process: a kill aimed at a service becomes the
    machine's power loss at that service's point."""
    sched = parse_schedule("app:during:payments.charge+12%,driver:after:submit")
    changed = {str(d) for d in (powerloss.with_power_loss(sched, 3, i) for i in range(20)) if d != sched}
    assert changed == {"powerloss:app:during:payments.charge+12%,driver:after:submit"}


def test_a_schedule_with_a_power_loss_where_fuse_is_missing_is_one_usage_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(powerloss, "unavailable", lambda: "power loss needs /dev/fuse (FUSE)")
    with pytest.raises(UsageError, match=r"^powerloss:after:b: power loss needs /dev/fuse"):
        powerloss.check_schedule(parse_schedule("before:a,powerloss:after:b"))
    powerloss.check_schedule(parse_schedule("before:a"))  # no power loss: nothing needed


def test_what_fuse_needs_is_said_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lossy_mount.shutil, "which", lambda name: None)
    if lossy_mount.os.path.exists("/dev/fuse") and lossy_mount.os.access("/dev/fuse", 6):
        assert "fusermount3" in str(lossy_mount.unavailable())


LOST = {
    "path": "checkpoint.json",
    "size_seen": 78,
    "size_kept": 0,
    "unsynced_bytes": 78,
    "ever_synced": False,
}


def test_an_attempt_keeps_what_the_power_loss_dropped_through_json() -> None:
    a = Attempt(1, "powerloss:after:pay", KILLED, -9, 1.0, killed_at="after:pay", lost_writes=(LOST,))
    assert Attempt.from_dict(a.to_dict()) == a
    assert powerloss.lost_note([LOST]).endswith("checkpoint.json (78 bytes seen, 0 kept, never fsynced)")


_seq = itertools.count(1)


def charge(key: str, attempt: int, eid: str) -> Call:
    payload: dict[str, Any] = {"customer": "alice", "amount": 1200}
    return Call(next(_seq), "payments", "charge", key, payload, CREATED, eid, attempt, 100 + attempt, 0.0)


def _diagnosed(lost: tuple[dict[str, Any], ...], killed_at: str) -> Any:
    base = LedgerSnapshot((charge("payout-a", 1, "ch_0001"),))
    case = LedgerSnapshot(
        (
            charge("payout-6a127e98-09b5-42d3-9c77-a9d9b7c1fce5", 1, "ch_0001"),
            charge("payout-01ee201b-d222-4ed6-98d8-efebc40589c0", 2, "ch_0002"),
        )
    )
    attempts = [
        Attempt(1, f"powerloss:{killed_at}", KILLED, -9, 1.0, killed_at=killed_at, lost_writes=lost),
        Attempt(2, None, EXITED, 0, 1.0),
    ]
    return next(v for v in diagnose(judge(base, case, attempts), baseline=base, attempts=attempts))


def test_a_key_lost_with_an_unsynced_checkpoint_is_named_with_the_file_and_its_fsync() -> None:
    dup = _diagnosed((LOST,), "after:pay_alice")
    assert dup.kind == DUPLICATE_EFFECT and dup.cause == "unsynced_write"
    assert (
        "dropped the unsynced data of checkpoint.json (78 bytes written, 0 survived: never fsynced)"
        in dup.observed
    )
    assert "fsync checkpoint.json" in dup.fix and "fsync the directory" in dup.fix


def test_a_lost_sqlite_commit_says_synchronous_full() -> None:
    wal = {**LOST, "path": "state.db-wal", "ever_synced": True}
    dup = _diagnosed((wal,), "during:payments.charge")
    assert dup.cause == "unsynced_write" and "synchronous=FULL" in dup.fix
    assert "fsynced before, not since its last write" in dup.observed


def test_a_power_loss_that_dropped_nothing_leaves_the_key_story() -> None:
    assert _diagnosed((), "after:pay_alice").cause == "key_new_per_attempt"


def test_the_named_folders_are_existing_directories_of_their_own(tmp_path: Path) -> None:
    workdir = tmp_path / "root" / "001-case"
    workdir.mkdir(parents=True)
    (tmp_path / "state").mkdir()
    options = DrillOptions(
        power_loss_paths=(str(tmp_path / "state"), "{workdir}/inside", str(tmp_path / "{thread}"))
    )
    with pytest.raises(UsageError, match=r"is not an existing directory"):
        powerloss.named_paths(options, workdir, "t1")
    (tmp_path / "t1").mkdir()
    assert powerloss.named_paths(options, workdir, "t1") == [tmp_path / "state", tmp_path / "t1"]
    with pytest.raises(UsageError, match=r"holds the case's workdir"):
        powerloss.named_paths(DrillOptions(power_loss_paths=(str(tmp_path / "root"),)), workdir, "t1")

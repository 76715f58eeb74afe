"""Where ``committed:TASK`` fires (kombu's ack returned, no Redis BRPOP reply pending), the
Redis pop window's point, and the cause a hang after it gets."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from killdrill.integrations import Cause
from killdrill.integrations.celery import acks, settings
from killdrill.integrations.celery.causes import NOT_TAKEN_CAUSE, POP_WINDOW_CAUSE, causes
from killdrill.records import HANG, Attempt, Violation


class Channel:
    """A kombu channel as far as the wrappers read it: ``_in_poll`` is set while a BRPOP is sent
    and its reply unread."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self._in_poll: object = None

    def _brpop_read(self, **options: Any) -> bool:
        self.events.append("read reply: message 3 recorded in unacked")
        self._in_poll = None
        return True

    def close(self) -> None:
        self.events.append("closed")


class Message:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def ack(self) -> None:
        self.channel.events.append("ack executed")


class Request:
    acknowledged = False
    task = "charge_order"

    def __init__(self, message: Message) -> None:
        self._message = message

    def acknowledge(self) -> None:  # Celery: schedules message.ack for the loop's next turn
        self.acknowledged = True


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(acks, "boundary", lambda point: seen.append(f"point {point}"))
    return seen


def _wired() -> tuple[Any, Any, Any, Any]:
    acknowledge = acks.wrap_acknowledge(Request.acknowledge, str)
    ack = acks.wrap_ack(Message.ack)
    read = acks.wrap_brpop_read(Channel._brpop_read)
    close = acks.wrap_close(Channel.close)
    return acknowledge, ack, read, close


def test_committed_fires_after_kombu_executed_the_ack_not_when_celery_scheduled_it(events: list[str]) -> None:
    acknowledge, ack, _, _ = _wired()
    message = Message(Channel(events))
    acknowledge(Request(message))
    assert events == []  # Celery's acknowledge returned: the ack is not in the broker yet
    ack(message)
    assert events == ["ack executed", "point committed:charge_order"]


def test_committed_waits_for_a_pending_brpop_reply_to_be_read(events: list[str]) -> None:
    acknowledge, ack, read, _ = _wired()
    channel = Channel(events)
    channel._in_poll = object()  # the next order is popped into a reply the loop has not read
    message = Message(channel)
    acknowledge(Request(message))
    ack(message)
    assert events == ["ack executed"]
    read(channel)
    assert events == [
        "ack executed",
        "read reply: message 3 recorded in unacked",
        "point committed:charge_order",
    ]


class Idle(Channel):
    """A channel whose BRPOP is blocked on empty queues: nothing is in its socket."""

    priority_steps = (0,)
    active_queues = ("celery",)

    def __init__(self, events: list[str], waiting: int) -> None:
        super().__init__(events)
        self.mine, self.theirs = socket.socketpair()
        self._in_poll = type("Connection", (), {"_sock": self.mine})()
        self.waiting = waiting

    def _q_for_pri(self, queue: str, pri: int) -> str:
        return queue

    @contextlib.contextmanager
    def conn_or_acquire(self) -> Iterator[Any]:
        yield type("Client", (), {"llen": lambda _, key: self.waiting})()


def test_a_brpop_blocked_on_empty_queues_is_no_reason_to_wait(events: list[str]) -> None:
    acknowledge, ack, _, _ = _wired()
    channel = Idle(events, waiting=0)
    message = Message(channel)
    acknowledge(Request(message))
    ack(message)
    assert events == ["ack executed", "point committed:charge_order"]


def test_a_queue_with_a_message_or_a_reply_in_the_socket_makes_the_point_wait(events: list[str]) -> None:
    acknowledge, ack, read, _ = _wired()
    for channel in (Idle(events, waiting=1), Idle(events, waiting=0)):
        if not channel.waiting:
            channel.theirs.send(b"*2\r\n")  # Redis answered: the reply is unread
        message = Message(channel)
        acknowledge(Request(message))
        ack(message)
        assert events == ["ack executed"]
        read(channel)
        assert events[-1] == "point committed:charge_order"
        events.clear()


def test_a_closing_channel_reaches_its_waiting_points_first(events: list[str]) -> None:
    acknowledge, ack, _, close = _wired()
    channel = Channel(events)
    channel._in_poll = object()
    message = Message(channel)
    acknowledge(Request(message))
    ack(message)
    close(channel)
    assert events == ["ack executed", "point committed:charge_order", "closed"]


def test_an_ack_celery_did_not_ask_for_is_no_point(events: list[str]) -> None:
    _, ack, _, _ = _wired()
    ack(Message(Channel(events)))
    assert events == ["ack executed"]


def test_the_pop_window_is_a_point_inside_a_brpop_read_only_when_asked(
    events: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deliver = acks.wrap_deliver(lambda transport, message, queue: events.append("delivered"))

    class Popping(Channel):
        def _brpop_read(self, **options: Any) -> bool:
            deliver(None, {}, "celery")
            return True

    read = acks.wrap_brpop_read(Popping._brpop_read)
    read(Popping(events))
    deliver(None, {}, "celery")  # a fanout delivery, not a pop
    assert events == ["delivered", "delivered"]
    events.clear()
    monkeypatch.setenv(settings.POP_WINDOW_ENV, "1")
    read(Popping(events))
    deliver(None, {}, "celery")
    assert events == [f"point {acks.POP_POINT}", "delivered", "delivered"]


def _attempt(number: int, process: str, killed_at: str | None) -> Attempt:
    outcome = "killed" if killed_at else "hang"
    return Attempt(number, killed_at, outcome, -9, 1000.0, killed_at=killed_at, process=process)


def _hang(runtime: dict[str, Any] | None = None) -> Violation:
    detail: dict[str, Any] = {"attempt": 1, "last_boundary": "before its first boundary"}
    if runtime is not None:
        detail["runtime"] = runtime
    return Violation(HANG, "attempt 1 hung: no exit within 60s", detail=detail)


def test_a_hang_after_a_kill_in_the_pop_window_is_named_with_its_fix() -> None:
    attempts = [_attempt(1, "driver", None), _attempt(2, "worker", "during:redis.brpop#3")]
    found = causes(_hang(), attempts)
    assert isinstance(found, Cause) and found.name == POP_WINDOW_CAUSE
    assert "in no Redis key" in found.observed and "RabbitMQ" in found.fix


def test_a_hang_whose_broker_holds_nothing_after_a_worker_kill_names_the_window() -> None:
    attempts = [_attempt(1, "driver", None), _attempt(2, "worker", "offset:2000ms")]
    found = causes(_hang({"unacked": 0, "waiting": {}}), attempts)
    assert found is not None and found.name == POP_WINDOW_CAUSE
    assert "offset:2000ms" in found.observed


def test_a_hang_whose_broker_still_holds_the_task_says_no_worker_took_it() -> None:
    attempts = [_attempt(1, "driver", None), _attempt(2, "worker", "before:charge_order")]
    held = {"unacked": 1, "waiting": {"celery": 2}, "visibility_timeout_s": 3.0}
    found = causes(_hang(held), attempts)
    assert found is not None and found.name == NOT_TAKEN_CAUSE
    assert "1 unacknowledged and 2 waiting" in found.observed and "--timeout" in found.fix
    assert causes(_hang({"unacked": 0, "waiting": {}}), [_attempt(1, "driver", None)]) is None
    assert causes(_hang(), [_attempt(1, "driver", None)]) is None


class Task:
    def __init__(self, acks_late: bool) -> None:
        self.acks_late = acks_late


def test_a_deployed_workers_late_acked_task_is_work_until_its_ack_reached_the_broker(
    events: list[str], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KILLDRILL_PROCESS", "worker[0]")
    acknowledge, ack, _, _ = _wired()
    message = Message(Channel(events))
    request = Request(message)
    request.id = "task-7"  # type: ignore[attr-defined]
    acks.starting(Task(acks_late=True), "task-7")
    acknowledge(request)
    assert capfd.readouterr().err == "killdrill: work pending task-7 task\n"  # not done at the result
    ack(message)
    assert events[-1] == "point committed:charge_order"
    assert capfd.readouterr().err == "killdrill: work done task-7\n"


def test_no_work_is_said_by_a_driver_or_for_a_task_acked_on_receipt(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KILLDRILL_PROCESS", "worker[0]")
    acks.starting(Task(acks_late=False), "task-8")
    monkeypatch.setenv("KILLDRILL_PROCESS", "driver")
    acks.starting(Task(acks_late=True), "task-9")
    assert capfd.readouterr().err == ""

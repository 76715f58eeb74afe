"""The kill-point grammar: what parses, what it means, and the exact text of what does not."""

import pytest

from killdrill.points import Fault, ScheduleError, parse_fault, parse_schedule


@pytest.mark.parametrize(
    ("text", "kill"),
    [
        ("before:charge_customer", Fault(point="before:charge_customer")),
        ("after:x#3", Fault(point="after:x", occurrence=3)),
        ("committed:write_invoice", Fault(point="committed:write_invoice")),
        ("during:payments.charge", Fault(point="during:payments.charge")),
        ("after:x+3.5ms", Fault(point="after:x", delay_ms=3.5)),
        ("before:x#2~5s", Fault(point="before:x", occurrence=2, hold_ms=5000.0)),
        ("offset:137ms", Fault(offset_ms=137.0)),
        ("offset:2s", Fault(offset_ms=2000.0)),
        ("offset:250us", Fault(offset_ms=0.25)),
    ],
)
def test_parse_and_print_round_trip(text: str, kill: Fault) -> None:
    assert parse_fault(text) == kill
    assert parse_fault(str(kill)) == kill


def test_schedule_is_one_kill_per_attempt() -> None:
    s = parse_schedule("before:charge_customer, during:mailbox.send")
    assert [str(k) for k in s] == ["before:charge_customer", "during:mailbox.send"]
    assert s.for_attempt(1) == Fault(point="before:charge_customer")
    assert s.for_attempt(3) is None
    assert str(parse_schedule("none")) == "none" and len(parse_schedule("")) == 0


@pytest.mark.parametrize(
    ("text", "bad", "why"),
    [
        ("befor:x", "befor:x", "unknown kind"),
        ("before:", "before:", "expected KIND:NAME"),
        ("charge", "charge", "expected KIND:NAME"),
        ("before:x#0", "before:x#0", "count from 1"),
        ("before:x+3", "before:x+3", "expected KIND:NAME"),
        ("offset:soon", "offset:soon", "offset:<number>"),
        ("before:a,,after:b", "", "empty"),
    ],
)
def test_errors_name_the_offending_text(text: str, bad: str, why: str) -> None:
    with pytest.raises(ScheduleError) as err:
        parse_schedule(text)
    assert err.value.text == bad
    assert why in str(err.value)

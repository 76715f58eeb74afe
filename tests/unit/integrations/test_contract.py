"""The plugin contract: a record or service that breaks it is refused in one line naming the
plugin; a hook that raises during a drill is said, naming the plugin and the hook."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from killdrill import integrations
from killdrill.integrations import HookWarning, Integration, PluginRefused
from killdrill.integrations._hooks import ReportedService
from killdrill.integrations.contract import check_record, check_service


class Service:
    def env(self, workdir: Path, thread: str) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass


def test_a_hook_with_the_wrong_arguments_is_refused_naming_the_plugin() -> None:
    record = Integration("acme", activate=lambda: None, causes=lambda violation: None)  # type: ignore[arg-type,misc]
    with pytest.raises(PluginRefused) as raised:
        integrations.register(record)
    assert str(raised.value) == (
        "the integration plugin 'acme' was refused: its causes hook takes 1 argument(s),"
        " the contract calls causes(violation, attempts)"
    )
    assert "acme" not in integrations.known()


def test_hooks_with_defaults_varargs_and_classes_are_accepted() -> None:
    def waits(timeline: Any, clean: Any, extra: int = 0) -> list[Any]:
        return []

    def causes(*args: Any) -> None:
        return None

    check_record(Integration("acme", activate=lambda: None, causes=causes, waits=waits, service=ServiceMaker))


class ServiceMaker:
    def __init__(self, root: Path, host: Any, options: Any) -> None:
        pass


def test_every_built_in_record_and_service_keeps_the_contract() -> None:
    from killdrill.integrations.celery.broker import CeleryBroker
    from killdrill.integrations.temporal.server import TemporalDevServer

    for record in integrations.known().values():
        check_record(record)
    for cls in (CeleryBroker, TemporalDevServer):
        check_service(cls.__name__, object.__new__(cls))


def test_a_service_without_close_or_with_a_misspelled_hook_is_refused() -> None:
    class NoClose:
        def env(self, workdir: Path, thread: str) -> dict[str, str]:
            return {}

    class Misspelled(Service):
        def explain_hangs(self, workdir: Path, thread: str) -> None:
            return None

    class WrongWaits(Service):
        def waits(self, workdir: Path, thread: str) -> list[Any]:
            return []

    with pytest.raises(
        PluginRefused,
        match=r"^the integration plugin 'acme' was refused: its service \(NoClose\) has no close\(\)$",
    ):
        check_service("acme", NoClose())
    with pytest.raises(
        PluginRefused,
        match=r"has explain_hangs\(\), which the harness never calls:"
        r" did you mean explain_hang\(workdir, thread\)\?$",
    ):
        check_service("acme", Misspelled())
    with pytest.raises(
        PluginRefused,
        match=r"its service's waits takes 2 argument\(s\),"
        r" the contract calls waits\(workdir, thread, timeline\)$",
    ):
        check_service("acme", WrongWaits())
    check_service("acme", Service())


def test_a_misspelled_record_field_is_named_with_the_nearest() -> None:
    with pytest.raises(TypeError) as raised:
        Integration("acme", wait=None)  # type: ignore[call-arg]
    assert integrations._unknown_field(raised.value) == " (did you mean waits?)"


def test_a_service_hook_that_raises_is_said_naming_the_plugin_and_the_hook() -> None:
    class Failing(Service):
        def waits(self, workdir: Path, thread: str, timeline: Any) -> list[Any]:
            raise ValueError("no history")

    service = ReportedService("acme", Failing())
    assert getattr(service, "explain_hang", None) is None and getattr(service, "release", None) is None
    with pytest.warns(HookWarning) as said:
        assert service.waits(Path("w"), "t", []) == []
    assert [str(w.message) for w in said] == [
        "the acme integration's waits hook raised ValueError: no history; the case's waits go without it"
    ]


def test_a_causes_hook_that_raises_is_said_and_the_drills_diagnosis_stands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def causes(violation: Any, attempts: Any) -> None:
        raise KeyError("attempt")

    record = Integration("acme", activate=lambda: None, causes=causes)
    monkeypatch.setattr(integrations, "_each", lambda names: [record])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert integrations.framework_cause(["acme"], object(), []) is None  # type: ignore[arg-type]
    ours = [str(w.message) for w in said if not issubclass(w.category, ResourceWarning)]  # not a GC's
    assert ours == [
        "the acme integration's causes hook raised KeyError: 'attempt'; the drill's own diagnosis stands"
    ]


def test_an_exit_abort_is_forgiven_only_by_its_signals_after_its_point() -> None:
    import signal

    from killdrill.integrations.contract import ExitAbort

    rule = ExitAbort(after="after:workflow.", note="n", signals=(signal.SIGABRT, signal.SIGSEGV))
    for rc in (-6, 134, -11, 139):  # killed by the signal, or a shell's 128+N
        assert rule.forgives(rc, "after:workflow.Settle"), rc
    for rc in (0, 1, -9, 137, None):  # a clean exit needs no forgiving; SIGKILL is never the SDK's
        assert not rule.forgives(rc, "after:workflow.Settle"), rc
    assert not rule.forgives(-11, "before:charge")  # the work was still open: a crash, a verdict
    assert not ExitAbort(after="after:", note="n").forgives(-11, "after:x")  # SIGABRT only by default


def test_a_service_offers_restart_as_a_hook_checked_and_reported_like_the_others() -> None:
    """``restart()`` makes a service a ``restart=NAME:`` target: called with no argument, what it
    returns starts the service again; a misspelling is refused, a failure names the plugin."""
    from killdrill.errors import HarnessError

    class Restarts(Service):
        def restart(self, hard: bool) -> None:
            return None

    class Misspelled(Service):
        def restarts(self) -> None:
            return None

    with pytest.raises(
        PluginRefused, match=r"its service's restart requires 1 argument\(s\), the contract calls restart\(\)"
    ):
        check_service("acme", Restarts())
    with pytest.raises(PluginRefused, match=r"did you mean restart\(\)\?"):
        check_service("acme", Misspelled())

    log: list[str] = []

    class Server(Service):
        def restart(self) -> Any:
            log.append("killed")

            def again() -> str:
                log.append("started")
                raise OSError("port taken")

            return again

    again = ReportedService("acme", Server()).restart()
    assert log == ["killed"]
    with pytest.raises(
        HarnessError, match=r"^the acme integration's service did not start again: OSError: port taken$"
    ):
        again()
    assert ReportedService("acme", Service()).restart is None  # offers none: not a target

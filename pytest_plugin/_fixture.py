"""The ``killdrill`` fixture: a drill session bound to one test."""

from __future__ import annotations

import json
import re
import shlex
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from killdrill.integrations import check_options
from killdrill.options import OptionError, Spelling, from_fields
from killdrill.pytest_plugin._options import MARKER, OPTION_NAMES, ROWS, _convert_option, _marker_spec, _Usage
from killdrill.pytest_plugin._parametrize import _Broken, _Regression
from killdrill.pytest_plugin._session import _STATE, _harness_errors, _same_command, discarded_if_interrupted
from killdrill.records import Verdict

if TYPE_CHECKING:
    from killdrill.drill import Drill, DrillOptions
    from killdrill.records import CaseResult, Discovery


class KilldrillFixture:
    """A drill session bound to one test: every workdir under its ``tmp_path``.

    Options come from the ini keys, then the test's ``killdrill`` marker, then the keyword
    arguments of each call.  Discovery is shared with the whole session (and cached across
    sessions), so a test pays only for its own cases.
    """

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self._request = request
        self._state = request.config.stash[_STATE]
        self._tmp_path = tmp_path
        problem = None
        try:
            _, _, _, self._marker_options = _marker_spec(list(request.node.iter_markers(MARKER)))
        except _Usage as exc:
            problem = str(exc)
        if problem is not None:  # failed outside the handler: no "during handling" chain
            pytest.fail(problem, pytrace=False)
        self._drills: dict[str, Drill] = {}
        self.results: list[CaseResult] = []

    def __repr__(self) -> str:
        return f"<killdrill fixture: workdirs under {self.root}>"

    @property
    def root(self) -> Path:
        """Where this test's workdirs go."""
        return self._tmp_path / "killdrill"

    def options(self, **overrides: Any) -> dict[str, Any]:
        """The effective DrillOptions fields for a call with ``overrides``."""
        unknown = set(overrides) - OPTION_NAMES
        if unknown:
            pytest.fail(f"killdrill: unknown option(s) {', '.join(sorted(unknown))}", pytrace=False)
        problem = None
        try:
            extra = {
                k: _convert_option(k, v, f"option {ROWS[k].spell(Spelling.KEYWORD)}")
                for k, v in overrides.items()
            }
        except _Usage as exc:
            problem = str(exc)
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        return self._state.options(self._marker_options, extra)

    def drill(self, command: Sequence[str], **overrides: Any) -> Drill:
        """A :class:`killdrill.Drill` of ``command`` with the session's discovery already in it."""
        __tracebackhide__ = True
        from killdrill.drill import Drill

        options = self.options(**overrides)
        ident = json.dumps([list(command), options], sort_keys=True, default=str)
        drill = self._drills.get(ident)
        if drill is None:
            n = len(self._drills)
            root = self.root if n == 0 else self._tmp_path / f"killdrill-{n + 1}"
            base = options.pop("root", None)  # killdrill_root / root=: this test's folder under it
            if base is not None:
                node = re.sub(r"[^A-Za-z0-9_.-]+", "_", self._request.node.nodeid)[:120]
                root = Path(base) / (node if n == 0 else f"{node}-{n + 1}")
            spelled = self._state.spelled(self._marker_options, overrides)
            checked = self._checked({**options, "root": root}, spelled)
            error: Exception | None = None
            try:
                drill = Drill(command, checked)
                drill.share_templates(self._state.pool)  # one template per session, not per test
                drill.use_discovery(self._state.discovery(command, options, spelled))
            except _harness_errors() as exc:
                error = exc
            if error is not None:
                self._harness_failure(None, error)
            assert drill is not None  # built above, or _harness_failure raised
            self._drills[ident] = drill
        return drill

    def _checked(self, options: dict[str, Any], spelled: dict[str, Spelling]) -> DrillOptions:
        """The drill options of this call, checked once: a mistake fails the test in one line."""
        __tracebackhide__ = True
        problem = None
        try:
            checked = from_fields(options, spelled)
            check_options(checked)  # the integrations' own options: a usage error too
            return checked
        except OptionError as exc:
            problem = f"killdrill {exc}"
        pytest.fail(problem, pytrace=False)  # outside the handler: no "during handling" chain

    def discover(self, command: Sequence[str], **overrides: Any) -> Discovery:
        """The kill-point catalogue and baseline of a clean run (cached for the session)."""
        __tracebackhide__ = True
        return self.drill(command, **overrides).discover()

    def points(self, command: Sequence[str], **overrides: Any) -> list[str]:
        """The catalogue's labels, in the order a clean run reached them."""
        __tracebackhide__ = True
        return self.discover(command, **overrides).labels()

    def run(self, command: Sequence[str], schedule: str, **overrides: Any) -> CaseResult:
        """Run one case; the result carries the pytest reproduction line and goes into JUnit XML.

        A harness error (bad point, command not found, failed discovery) fails the test with
        its one-line message rather than a traceback through killdrill.
        """
        __tracebackhide__ = True
        from dataclasses import replace

        self._skip_foreign_regression(command, schedule)
        drill = self.drill(command, **overrides)
        error: Exception | None = None
        try:
            with discarded_if_interrupted(drill.root):
                result = self._case(drill, command, str(schedule), overrides)
        except _harness_errors() as exc:
            error = exc
        if error is not None:
            self._harness_failure(schedule, error)
        result = replace(
            result, extra_reproduce=(*result.extra_reproduce, self._pytest_line(result.schedule))
        )
        self.results.append(result)
        props = self._request.node.user_properties
        # Plain str, never the StableName enum: xdist's execnet cannot send an enum to the controller
        # (the worker crashed after its first drill test).
        props.append(("killdrill_schedule", str(result.schedule)))
        props.append(("killdrill_verdict", str(Verdict.EXACTLY_ONCE if result.ok else Verdict.VIOLATED)))
        props.append(("killdrill_kinds", ",".join(result.kinds)))
        props.append(("killdrill_reproduce", result.reproduce))
        return result

    def _case(
        self, drill: Drill, command: Sequence[str], schedule: str, overrides: dict[str, Any]
    ) -> CaseResult:
        """This item's case: with ``workers`` > 1 started at once with its siblings' by the first
        of them to run (``_concurrent``), otherwise run now."""
        workers = drill.options.workers
        if workers <= 1 or not self._state.concurrent:
            return drill.run_case(schedule)
        node, ahead = self._request.node, self._state.ahead
        ident = json.dumps([list(command), self.options(**overrides)], sort_keys=True, default=str)
        future = ahead.take(node.nodeid, ident, schedule)
        if future is None and _case_of(node, command) == schedule:
            ahead.start(node, ident, workers, lambda other: _case_of(other, command), drill.run_case)
            future = ahead.take(node.nodeid, ident, schedule)
        return ahead.wait(future) if future is not None else drill.run_case(schedule)

    def _skip_foreign_regression(self, command: Sequence[str], schedule: str) -> None:
        """A corpus case given to a ``points=`` test runs only if it was recorded for this command."""
        callspec = getattr(self._request.node, "callspec", None)
        param = callspec.params.get("kill_point") if callspec is not None else None
        if not isinstance(param, _Regression) or param.schedule != str(schedule):
            return
        if not any(_same_command(c, command) for c in param.commands):
            pytest.skip(
                f"regression {schedule} was recorded for another command: {shlex.join(param.commands[0])}"
            )

    def _harness_failure(self, schedule: str | None, exc: Exception) -> NoReturn:
        __tracebackhide__ = True
        if schedule is not None:
            self._request.node.user_properties.append(("killdrill_schedule", str(schedule)))
        if isinstance(exc, OptionError):  # options that do not go together (the command's rules)
            pytest.fail(f"killdrill {exc}", pytrace=False)
        self._request.node.user_properties.append(("killdrill_kinds", "harness_error"))
        pytest.fail(f"killdrill harness error: {exc}", pytrace=False)

    def _pytest_line(self, schedule: str) -> str:
        node = self._request.node
        callspec = getattr(node, "callspec", None)
        param = callspec.params.get("kill_point") if callspec is not None else None
        if param is not None and str(param) == schedule:
            base = f"{node.parent.nodeid}::{node.originalname}" if node.parent else node.nodeid
            return shlex.join(["pytest", base, f"--killdrill-point={schedule}"])
        return shlex.join(["pytest", node.nodeid])

    def _write_json(self) -> None:
        if self._state.json_dir is None or not self.results:
            return
        from killdrill.report.drill import summarize_cases, write_json

        nodeid = self._request.node.nodeid
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[:120]
        name += "-" + uuid.uuid5(uuid.NAMESPACE_URL, nodeid).hex[:8]
        write_json(
            self._state.json_dir / f"{name}.json",
            {
                "nodeid": nodeid,
                "cases": [c.to_dict() for c in self.results],
                "summary": summarize_cases(self.results),
            },
        )


def _case_of(item: pytest.Item, command: Sequence[str]) -> str | None:
    """The schedule ``item``'s kill_point gives ``command``: none for a broken parameter or a
    regression recorded for another command (the item skips it)."""
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("kill_point") if callspec is not None else None
    if param is None or isinstance(param, _Broken):
        return None
    if isinstance(param, _Regression) and not any(_same_command(c, command) for c in param.commands):
        return None
    return str(param)


@pytest.fixture
def killdrill(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KilldrillFixture]:
    """A drill session for this test: ``killdrill.run(COMMAND, kill_point) -> CaseResult``.

    Under Hypothesis ``@given`` the fixture is safe to share between examples (each run gets
    its own workdir); suppress ``HealthCheck.function_scoped_fixture`` in ``@settings``.
    """
    session = KilldrillFixture(request, tmp_path)
    yield session
    session._write_json()

"""The killdrill pytest plugin: kill-point drills as parametrized tests.

```python
AGENT = ["python", "-m", "agent", "--thread", "{thread}", "--db", "{workdir}/ckpt.sqlite"]

@pytest.mark.killdrill(discover=AGENT)            # or points=["during:payments.charge", ...]
def test_every_boundary(killdrill, kill_point):
    killdrill.run(AGENT, kill_point).assert_exactly_once()
```

Installed through the ``pytest11`` entry point named ``killdrill`` (``-p no:killdrill`` turns
it off).  Importing this module stays cheap: only pytest and the standard library; the
supervisor, the ledger (SQLAlchemy) and the verdict load when a fixture or ``discover=`` is
used.  Discovery runs once per command and options per session, and is kept in pytest's cache
keyed by the command and the stat of the agent's files, so collection stays fast.
"""

from __future__ import annotations

import json
import random
import re
import shlex
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from killdrill.options import OPTIONS, Option
from killdrill.pytest_plugin._cache import DiscoveryCache, discovery_key

if TYPE_CHECKING:
    from killdrill.drill import Drill
    from killdrill.records import CaseResult, Discovery

__all__ = ["KilldrillFixture", "random_schedules"]

MARKER = "killdrill"

# ini key -> its row of the one option table (killdrill.options): killdrill_FIELD for every field.
_INI: dict[str, Option] = {row.ini: row for row in OPTIONS}
OPTION_NAMES = frozenset(row.field for row in OPTIONS)
_MARKER_ARGS = frozenset({"points", "discover", "command"})


class _Usage(Exception):
    """A bad marker argument or option value: reported once, in one line, as a test error."""


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("killdrill", "killdrill: kill-point drills")
    g.addoption(
        "--killdrill-point",
        metavar="SCHEDULE",
        help="run each kill_point test with only this schedule (listed or not): the reproduction path",
    )
    g.addoption(
        "--killdrill-random",
        type=int,
        default=0,
        metavar="N",
        help="add N random schedules per drill test (needs discover= or command= in the marker)",
    )
    g.addoption("--killdrill-seed", type=int, metavar="S", help="seed of the random schedules (printed)")
    g.addoption(
        "--killdrill-regressions",
        metavar="PATH",
        help="replay the recorded failing schedules of a JSON corpus for tests whose command matches",
    )
    g.addoption("--killdrill-keep", action="store_true", help="keep the workdirs of passing cases too")
    g.addoption("--killdrill-json", metavar="DIR", help="write each drill test's cases as JSON into DIR")
    g.addoption(
        "--killdrill-rediscover", action="store_true", help="ignore cached discoveries and run them again"
    )
    for name, row in _INI.items():
        parser.addini(name, row.help, type=row.kind.ini_type)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "killdrill(points=[...], discover=COMMAND, command=COMMAND, **options): parametrize kill_point "
        "with these schedules (or every point a clean run of COMMAND reaches); options are "
        "DrillOptions fields (timeout, http_fakes, identity, between, env, ...)",
    )
    config.stash[_STATE] = _State.from_config(config)
    from killdrill.pytest_plugin import _summary

    config.pluginmanager.register(_summary, "killdrill-summary")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(config), "killdrill-xdist")


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash[_STATE]
    line = f"killdrill: --killdrill-seed={state.seed}"
    if state.random:
        line += f" (--killdrill-random={state.random})"
    lines = [line]
    if state.point is not None:
        lines.append(f"killdrill: only --killdrill-point={shlex.quote(state.point)}")
    if state.regressions_path:
        lines.append(f"killdrill: {len(state.regressions)} regression(s) from {state.regressions_path}")
    return lines


class _XdistHooks:
    """Gives every xdist worker the controller's seed and session token, so all workers
    collect the same random cases and share one forced rediscovery."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        state = self.config.stash[_STATE]
        node.workerinput["killdrill_seed"] = state.seed
        node.workerinput["killdrill_token"] = state.token


# ---- session state -----------------------------------------------------------------------------


@dataclass
class _State:
    """Per-session settings read once from options and ini, plus the discovery cache."""

    config: pytest.Config
    seed: int
    token: str
    random: int
    point: str | None
    regressions_path: str | None
    regressions: list[tuple[tuple[str, ...], str]]
    ini_options: dict[str, Any]
    keep: bool
    json_dir: Path | None
    cache: DiscoveryCache
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: pytest.Config) -> _State:
        workerinput = getattr(config, "workerinput", None) or {}
        seed = config.getoption("killdrill_seed")
        if seed is None:
            seed = workerinput.get("killdrill_seed", random.SystemRandom().randrange(10**6))
        token = workerinput.get("killdrill_token") or uuid.uuid4().hex
        point = config.getoption("killdrill_point")
        if point is not None:
            point = _check_schedule(point, "--killdrill-point")
        path = config.getoption("killdrill_regressions")
        regressions = _load_regressions(path) if path else []
        try:
            ini_options = _ini_options(config)
        except _Usage as exc:
            raise pytest.UsageError(str(exc)) from None
        json_dir = config.getoption("killdrill_json")
        if json_dir:  # checked now, not after every drill test has run
            from killdrill.errors import UsageError
            from killdrill.options import check_output_dir

            try:
                check_output_dir(json_dir, f"--killdrill-json {json_dir}")
            except UsageError as exc:
                raise pytest.UsageError(f"killdrill {exc}") from None
        cache_dir = None
        if getattr(config, "cache", None) is not None:
            cache_dir = config.cache.mkdir("killdrill")
        return cls(
            config=config,
            seed=int(seed),
            token=token,
            random=max(0, config.getoption("killdrill_random") or 0),
            point=point,
            regressions_path=path,
            regressions=regressions,
            ini_options=ini_options,
            keep=bool(config.getoption("killdrill_keep")),
            json_dir=Path(json_dir).resolve() if json_dir else None,
            cache=DiscoveryCache(
                cache_dir, token=token, force=bool(config.getoption("killdrill_rediscover"))
            ),
        )

    def options(self, *layers: Mapping[str, Any]) -> dict[str, Any]:
        """ini, then marker, then call keywords (later wins); ``--killdrill-keep`` on top."""
        merged = dict(self.ini_options)
        for layer in layers:
            merged.update(layer)
        if self.keep:
            merged["keep"] = True
        return merged

    def discovery(self, command: Sequence[str], options: Mapping[str, Any]) -> Discovery:
        """The session's discovery of ``command`` (cached); raises HarnessError when it fails."""
        from killdrill.drill import Drill, HarnessError

        opts = {k: v for k, v in options.items() if k != "root"}
        key = discovery_key(command, opts)
        if key.digest in self.errors:
            raise HarnessError(self.errors[key.digest])

        def make() -> Discovery:
            if opts.get("ledger_url"):  # a file that is not a ledger: one line, not the agent's traceback
                from killdrill.ledger import Ledger

                Ledger(opts["ledger_url"], "kd-check").close()
            root = _discovery_root(self.config)
            try:
                return Drill(command, **opts, root=root).discover()
            finally:
                if not opts.get("keep"):
                    _rmdir_if_empty(root)

        try:
            return self.cache.get_or_make(key, make)
        except _harness_errors() as exc:
            self.errors[key.digest] = " ".join(str(exc).removeprefix("killdrill: ").split("\n", 1)[:1])
            raise HarnessError(self.errors[key.digest]) from None


_STATE = pytest.StashKey[_State]()


def _harness_errors() -> tuple[type[Exception], ...]:
    """What fails a test in one line (never a traceback through killdrill): every KilldrillError,
    and the harness errors not yet under that root (the layered redesign moves them there)."""
    from killdrill.errors import HarnessError, KilldrillError
    from killdrill.launcher import LaunchError
    from killdrill.ledger import LedgerError
    from killdrill.points import ScheduleError

    return (KilldrillError, HarnessError, LedgerError, LaunchError, ScheduleError)


def _discovery_root(config: pytest.Config) -> Path:
    """A new folder under pytest's basetemp, never one used before by this process: the ledger
    keeps engines per SQLite path, and in-process inner runs (pytester) reuse basetemp paths."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        return Path(factory.mktemp(f"killdrill-discovery-{uuid.uuid4().hex[:8]}", numbered=False))
    import tempfile

    return Path(tempfile.mkdtemp(prefix="killdrill-discovery-"))


def _rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _check_schedule(text: str, where: str) -> str:
    from killdrill.points import ScheduleError, parse_schedule

    try:
        return str(parse_schedule(text))
    except ScheduleError as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


def _ini_options(config: pytest.Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, row in _INI.items():
        raw = config.getini(name)
        if raw in (None, "", []) or (row.kind.ini_type == "bool" and raw is False):
            continue
        out[row.field] = _convert_option(row.field, raw, f"ini {name}")
    return out


def _convert_option(opt: str, raw: Any, where: str) -> Any:
    """Ini text or marker/keyword values into DrillOptions values (the table's parsers), with
    one-line errors."""
    from killdrill.options import OptionError, convert

    try:
        return convert(opt, raw, where)
    except OptionError as exc:
        raise _Usage(f"killdrill {exc}") from None


def _load_regressions(path: str) -> list[tuple[tuple[str, ...], str]]:
    """``{"regressions": [{"command": [...], "schedule": "...", "kinds": [...]}, ...]}``
    (a bare list of such entries is accepted too; a string command is split like a shell)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--killdrill-regressions {path}: {exc}") from None
    entries = data.get("regressions") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise pytest.UsageError(f'--killdrill-regressions {path}: no "regressions" list')
    out: list[tuple[tuple[str, ...], str]] = []
    for i, entry in enumerate(entries):
        command = entry.get("command") if isinstance(entry, dict) else None
        schedule = entry.get("schedule") if isinstance(entry, dict) else None
        if isinstance(command, str):
            command = shlex.split(command)
        if not isinstance(command, list) or not isinstance(schedule, str):
            raise pytest.UsageError(
                f"--killdrill-regressions {path}: entry {i} needs a command list and a schedule string"
            )
        out.append((tuple(command), _check_schedule(schedule, f"--killdrill-regressions {path} entry {i}")))
    return out


def _same_command(a: Sequence[str], b: Sequence[str]) -> bool:
    """Commands match argument by argument; ``python``, ``python3`` and this interpreter agree."""
    import sys

    def norm(cmd: Sequence[str]) -> list[str]:
        cmd = [str(x) for x in cmd]
        if cmd and (cmd[0] in ("python", "python3") or cmd[0] == sys.executable):
            cmd[0] = "python"
        return cmd

    return norm(a) == norm(b)


# ---- parametrization ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Broken:
    """A kill_point parameter that cannot be made (failed discovery, bad marker): the test
    errors at setup with this message instead of collection failing with a traceback."""

    message: str


@dataclass(frozen=True)
class _Regression:
    """A corpus schedule for a ``points=`` test, whose command is only known when it runs:
    ``KilldrillFixture.run`` replays it for a recorded command and skips it for any other."""

    schedule: str
    commands: tuple[tuple[str, ...], ...]

    def __str__(self) -> str:
        return self.schedule


def _unmatched_regressions(
    regressions: Sequence[tuple[tuple[str, ...], str]], have: Sequence[Any]
) -> list[Any]:
    by_schedule: dict[str, list[tuple[str, ...]]] = {}
    for command, schedule in regressions:
        if schedule not in have:
            by_schedule.setdefault(schedule, []).append(command)
    return [_Regression(s, tuple(cs)) for s, cs in by_schedule.items()]


def _marker_spec(
    markers: Sequence[pytest.Mark],
) -> tuple[list[str] | None, tuple[str, ...] | None, tuple[str, ...] | None, dict[str, Any]]:
    """points, discover command, command and options from the markers (the closest wins)."""
    points: list[str] | None = None
    discover: tuple[str, ...] | None = None
    command: tuple[str, ...] | None = None
    options: dict[str, Any] = {}
    for mark in reversed(list(markers)):  # farthest first, so the closest overrides
        if mark.args:
            raise _Usage(f"@pytest.mark.killdrill takes keyword arguments only, got {mark.args!r}")
        for k, v in mark.kwargs.items():
            if k == "points":
                if isinstance(v, str) or not all(isinstance(p, str) for p in v):
                    raise _Usage("points= must be a list of schedule strings")
                points = list(v)
            elif k in ("discover", "command"):
                if isinstance(v, str) or not all(isinstance(p, str) for p in v):
                    raise _Usage(f"{k}= must be the command as a list of strings")
                if k == "discover":
                    discover = tuple(v)
                else:
                    command = tuple(v)
            elif k in OPTION_NAMES:
                options[k] = _convert_option(k, v, f"marker {k}=")
            else:
                known = ", ".join(sorted(_MARKER_ARGS | OPTION_NAMES))
                raise _Usage(f"@pytest.mark.killdrill: unknown argument {k}= (known: {known})")
    return points, discover, command or discover, options


def random_schedules(
    discovery: Discovery, n: int, rng: random.Random, exclude: Sequence[str] = ()
) -> list[str]:
    """``n`` distinct schedules drawn from a catalogue, none in ``exclude``.

    Only kinds that a resumed run is sure to reach: a named point; two named kills where the
    second is later in the catalogue (and its first occurrence, since occurrences count per
    attempt); a kill a few ms after a point, at most half the time left before the last
    boundary, so the process is still running when it lands.
    """
    entries = list(discovery.catalogue)
    if not entries or n <= 0:
        return []
    last_t = entries[-1].t_ms
    seen = set(exclude)
    out: list[str] = []
    for _ in range(50 * n):
        if len(out) >= n:
            break
        i = rng.randrange(len(entries))
        e = entries[i]
        roll = rng.random()
        later = [x for x in entries[i + 1 :] if x.occurrence == 1 and x.label != e.label]
        if roll < 0.4 and later:
            text = f"{e.label},{rng.choice(later).label}"
        elif roll < 0.7 and last_t - e.t_ms > 2.0:
            text = f"{e.label}+{round(rng.uniform(0.1, (last_t - e.t_ms) / 2), 1):g}ms"
        else:
            text = e.label
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kill_point" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash[_STATE]
    markers = list(metafunc.definition.iter_markers(MARKER))
    params: list[Any]
    try:
        points, discover, command, options = _marker_spec(markers)
        if not markers and state.point is None:
            return  # the kill_point fixture says what is missing
        if state.point is not None:
            params = [state.point]
        else:
            params = [_check_schedule(p, f"{metafunc.definition.nodeid}: points") for p in points or []]
            discovery = None
            if discover is not None or (command is not None and state.random):
                discovery = state.discovery(discover or command or (), state.options(options))
            if discover is not None and discovery is not None:
                params += [x for x in discovery.labels() if x not in params]
            if command is not None:
                params += [s for c, s in state.regressions if _same_command(c, command) and s not in params]
            elif points is not None:
                params += _unmatched_regressions(state.regressions, params)
            if state.random and discovery is not None:
                rng = random.Random(f"{state.seed}:{metafunc.definition.nodeid}")
                params += random_schedules(discovery, state.random, rng, exclude=params)
    except (_Usage, pytest.UsageError) as exc:
        params = [_Broken(str(exc))]
    except Exception as exc:
        if not isinstance(exc, _harness_errors()):
            raise
        params = [_Broken(f"killdrill discovery failed: {exc}")]
    ids = ["killdrill-error" if isinstance(p, _Broken) else str(p) for p in params]
    metafunc.parametrize("kill_point", params, ids=ids, indirect=True)


@pytest.fixture
def kill_point(request: pytest.FixtureRequest) -> str:
    """The schedule of this case, from ``@pytest.mark.killdrill(points=[...])`` or ``(discover=...)``."""
    param = getattr(request, "param", None)
    if param is None:
        pytest.fail(
            "kill_point has no schedules: mark the test with @pytest.mark.killdrill(points=[...]) "
            "or @pytest.mark.killdrill(discover=COMMAND)",
            pytrace=False,
        )
    if isinstance(param, _Broken):
        pytest.fail(param.message, pytrace=False)
    return str(param)


# ---- the fixture -------------------------------------------------------------------------------


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
            extra = {k: _convert_option(k, v, f"option {k}=") for k, v in overrides.items()}
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
            error: Exception | None = None
            try:
                drill = Drill(command, **options, root=root)
                drill.use_discovery(self._state.discovery(command, options))
            except _harness_errors() as exc:
                error = exc
            if error is not None:
                self._harness_failure(None, error)
            assert drill is not None  # built above, or _harness_failure raised
            self._drills[ident] = drill
        return drill

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
            result = drill.run_case(schedule)
        except _harness_errors() as exc:
            error = exc
        if error is not None:
            self._harness_failure(schedule, error)
        result = replace(
            result, extra_reproduce=(*result.extra_reproduce, self._pytest_line(result.schedule))
        )
        self.results.append(result)
        props = self._request.node.user_properties
        props.append(("killdrill_schedule", result.schedule))
        props.append(("killdrill_verdict", "exactly-once" if result.ok else "violated"))
        props.append(("killdrill_kinds", ",".join(result.kinds)))
        props.append(("killdrill_reproduce", result.reproduce))
        return result

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
        from killdrill.report import summarize_cases, write_json

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


@pytest.fixture
def killdrill(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KilldrillFixture]:
    """A drill session for this test: ``killdrill.run(COMMAND, kill_point) -> CaseResult``.

    Under Hypothesis ``@given`` the fixture is safe to share between examples (each run gets
    its own workdir); suppress ``HealthCheck.function_scoped_fixture`` in ``@settings``.
    """
    session = KilldrillFixture(request, tmp_path)
    yield session
    session._write_json()

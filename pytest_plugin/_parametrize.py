"""Parametrization: the ``kill_point`` cases of a test from its marker, the regressions corpus
and ``--killdrill-random``."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from killdrill.pytest_plugin._options import MARKER, _check_schedule, _marker_spec, _Usage
from killdrill.pytest_plugin._session import _STATE, _harness_errors, _same_command

if TYPE_CHECKING:
    from killdrill.records import Discovery


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
                discovery = state.discovery(
                    discover or command or (), state.options(options), state.spelled(options)
                )
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

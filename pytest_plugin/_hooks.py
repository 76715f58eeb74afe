"""The plugin's command-line options, marker registration, report header and xdist hook."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from killdrill.pytest_plugin._options import _INI
from killdrill.pytest_plugin._session import _STATE, _State


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


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's fork templates stop with it (interrupted or not); each has its keepers clean up."""
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.pool.close()


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

"""The plugin's command-line options, marker registration, report header and xdist hook."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from typing import Any

import pytest

from killdrill.options import Flag, Option, OptionError
from killdrill.pytest_plugin import _signals
from killdrill.pytest_plugin._concurrent import ConcurrentHooks
from killdrill.pytest_plugin._flags import PLUGIN_OPTIONS
from killdrill.pytest_plugin._options import _INI
from killdrill.pytest_plugin._session import _STATE, _State


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--killdrill-*`` flags (``_flags.PLUGIN_OPTIONS``) and the drill options' ini
    keys (``OPTIONS``): each derived from its row, its text parsed by the row's kind."""
    g = parser.getgroup("killdrill", "killdrill: kill-point drills")
    for row in PLUGIN_OPTIONS:
        if not row.flag:
            continue
        kw: dict[str, Any] = {"dest": row.field, "help": row.help}
        if isinstance(row.kind, Flag):
            g.addoption(row.flag, action="store_true", **kw)
        else:
            g.addoption(row.flag, type=_flag_type(row), default=row.default, metavar=row.kind.metavar, **kw)
    for name, row in _INI.items():
        parser.addini(name, row.help, type=row.kind.ini_type)


def _flag_type(row: Option) -> Callable[[str], Any]:
    """A flag's argparse ``type``: its row's kind, its error in argparse's words (a usage error)."""

    def parse(text: str) -> Any:
        try:
            return row.kind.from_text(text)
        except OptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def pytest_configure(config: pytest.Config) -> None:
    _signals.install()
    config.addinivalue_line(
        "markers",
        "killdrill(points=[...], discover=COMMAND, command=COMMAND, **options): parametrize kill_point "
        "with these schedules (or every point a clean run of COMMAND reaches); options are "
        "DrillOptions fields (timeout, http_fakes, identity, between, env, ...)",
    )
    config.stash[_STATE] = _State.from_config(config)
    from killdrill.pytest_plugin import _summary

    config.pluginmanager.register(_summary, "killdrill-summary")
    config.pluginmanager.register(ConcurrentHooks(config.stash[_STATE].ahead), "killdrill-concurrent")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(config), "killdrill-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's fork templates stop with it (interrupted or not); each has its keepers clean up."""
    try:
        state = config.stash.get(_STATE, None)
        if state is not None:
            state.ahead.stop()
            state.pool.close()
    finally:
        _signals.uninstall()


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash[_STATE]
    line = f"killdrill: --killdrill-seed={state.seed}"
    if state.random:
        line += f" (--killdrill-random={state.random})"
    lines = [line]
    if state.workers is not None and state.workers > 1:
        how = "at once" if state.concurrent else "one at a time in each xdist worker"
        lines.append(f"killdrill: --killdrill-workers={state.workers}: a drill test's cases run {how}")
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

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        """A worker up: its pid (execnet's popen gateway holds its process), told of a SIGTERM
        the controller alone gets."""
        _signals.forward_to(_worker_pid(node))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        _signals.forget(_worker_pid(node))  # its pid may be another process's next


def _worker_pid(node: Any) -> int | None:
    popen = getattr(getattr(node.gateway, "_io", None), "popen", None)
    return getattr(popen, "pid", None)

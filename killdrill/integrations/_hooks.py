"""Calling a plugin's hooks: a hook that raises is said in one line naming the plugin and the
hook (a :class:`~killdrill.integrations.contract.HookWarning`), never swallowed silently.

A service is wrapped once its factory returned it (:class:`ReportedService`): the drill calls its
optional hooks as it always did, and what one raises is said before the drill goes on without it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from killdrill.errors import HarnessError, one_line
from killdrill.integrations.contract import (
    SERVICE_HOOKS,
    Held,
    HookWarning,
    Restarting,
    Service,
    Timeline,
    Wait,
)

__all__ = ["ReportedService", "hook_failed"]

T = TypeVar("T")


def hook_failed(plugin: str, hook: str, exc: BaseException, then: str) -> str:
    """Say once, as a warning, that ``plugin``'s ``hook`` raised ``exc``; ``then``: what the drill
    does without it.  Returns the line."""
    line = f"the {plugin} integration's {hook} hook raised {type(exc).__name__}: {one_line(exc)[0]}; {then}"
    warnings.warn(HookWarning(line), stacklevel=3)
    return line


def called(plugin: str, hook: str, fn: Callable[..., T], *args: Any, fallback: T, then: str) -> T:
    """``fn(*args)``, or ``fallback`` once its exception was said."""
    try:
        return fn(*args)
    except Exception as exc:  # a plugin's failure: said, and the drill goes on without it
        hook_failed(plugin, hook, exc, then)
        return fallback


class ReportedService:
    """``service`` (of the integration ``plugin``) as the drill calls it: an optional hook it lacks
    is absent here too; what one raises is said, naming the plugin and the hook."""

    def __init__(self, plugin: str, service: Service) -> None:
        self.plugin = plugin
        self.service = service
        for hook in SERVICE_HOOKS:
            if getattr(service, hook, None) is None:
                setattr(self, hook, None)

    def __repr__(self) -> str:
        return f"ReportedService({self.plugin!r}, {self.service!r})"

    def __getattr__(self, name: str) -> Any:  # the service's own attributes (its address, ...)
        return getattr(self.service, name)

    def env(self, workdir: Path, thread: str) -> dict[str, str]:
        return self.service.env(workdir, thread)

    def close(self) -> None:
        self.service.close()

    def release(self, workdir: Path, thread: str) -> None:
        try:
            self.service.release(workdir, thread)  # type: ignore[attr-defined]
        except Exception as exc:  # what the run left may stay: the case ends in one line naming it
            why = f"{type(exc).__name__}: {one_line(exc)[0]}"
            raise HarnessError(f"the {self.plugin} integration's release hook raised {why}") from exc

    def explain_hang(self, workdir: Path, thread: str) -> Held | None:
        try:
            found: Held | None = self.service.explain_hang(workdir, thread)  # type: ignore[attr-defined]
        except Exception as exc:
            hook_failed(self.plugin, "explain_hang", exc, "the hang is judged without it")
            raise  # the drill says the runtime could not be asked
        return found

    def waits(self, workdir: Path, thread: str, timeline: Timeline) -> list[Wait]:
        fn = self.service.waits  # type: ignore[attr-defined]
        return called(
            self.plugin,
            "waits",
            fn,
            workdir,
            thread,
            timeline,
            fallback=[],
            then="the case's waits go without it",
        )

    def restart(self) -> Restarting:
        """The service killed now; what it returns starts it again.  Either failing is one line
        naming the plugin (the case cannot go on without its dependency)."""
        try:
            again: Restarting = self.service.restart()  # type: ignore[attr-defined]
        except Exception as exc:
            why = f"{type(exc).__name__}: {one_line(exc)[0]}"
            raise HarnessError(f"the {self.plugin} integration's restart hook raised {why}") from exc

        def start() -> str:
            try:
                return str(again())
            except Exception as exc:
                why = f"{type(exc).__name__}: {one_line(exc)[0]}"
                said = f"the {self.plugin} integration's service did not start again: {why}"
                raise HarnessError(said) from exc

        return start

"""How the HTTP fakes run a provider: the attempt's binding, the server-side fakes (claim, hold,
execute, under an armed connection fault), and the answer handed to the route that renders it.

Shared by the HTTP routes (:mod:`killdrill.fakes.http`, :mod:`killdrill.fakes.wire`) and the SMTP
fake: one binding type, one way to execute a request.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from killdrill.agent import ControlClient
from killdrill.fakes.errors import FakeProviderError
from killdrill.fakes.handle import Fakes, result_of
from killdrill.fakes.processing import Answer, FakeRequest, process
from killdrill.ledger import Ledger

__all__ = ["Binding", "FaultPlan", "Reset", "ServerFakes"]


class Reset(Exception):
    """An armed ``reset:`` fault: the handler resets the connection, nothing was processed."""


class FaultPlan:
    """One attempt's armed connection fault: which request of which op, and whom to tell."""

    def __init__(
        self, fault: str, point: str, occurrence: int, hold_s: float, applied: Callable[[str], None]
    ):
        self.fault, self.occurrence, self.hold_s, self.applied = fault, occurrence, hold_s, applied
        self.op = point.split(":", 1)[1]
        self._seen = 0
        self._lock = threading.Lock()

    def take(self, provider: str, op: str) -> str | None:
        """The fault to apply to this request (counted per op, in arrival order), or None."""
        if f"{provider}.{op}" != self.op:
            return None
        with self._lock:
            self._seen += 1
            hit = self._seen == self.occurrence
        if hit:
            label = self.op if self.occurrence == 1 else f"{self.op}#{self.occurrence}"
            self.applied(
                f"reset the connection of {label} before it was processed"
                if self.fault == "reset"
                else f"dropped the response of {label} after the provider committed it"
                + (f" (held {self.hold_s:g}s)" if self.hold_s else "")
            )
            return self.fault
        return None


@dataclass(frozen=True)
class Binding:
    """Where requests are recorded now: the supervisor rebinds before each attempt."""

    url: str
    thread: str
    attempt: int
    control: ControlClient | None
    faults: FaultPlan | None = None

    @functools.cached_property
    def ledger(self) -> Ledger:
        """The binding's ledger handle, opened on first use and shared by its requests."""
        return Ledger(self.url, self.thread)

    @classmethod
    def of_attempt(
        cls, url: str, thread: str, attempt: int, control_address: str | None, control_token: str | None
    ) -> Binding:
        """An attempt's binding; its ``during:`` announcements open a connection each (a server's
        handler thread is short-lived: its socket must not outlive it)."""
        control = (
            ControlClient(control_address, control_token or "", persistent=False) if control_address else None
        )
        return cls(url, thread, attempt, control)


class ServerFakes(Fakes):
    """The fakes as the server runs them: claim, hold, execute; the route renders the answer."""

    def __init__(
        self,
        ledger: Ledger,
        attempt: int,
        pid: int | Callable[[], int],
        faults: FaultPlan | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        """``context``: the runtime context the request carried (``killdrill.agent.CONTEXT_HEADER``),
        recorded with its call as an in-process call records the caller's."""
        super().__init__(ledger, attempt)
        self._pid = pid
        self.faults = faults
        self.context = context
        self._answers: list[Answer] = []  # the request a served provider method made (serve)

    @functools.cached_property
    def pid(self) -> int:
        """The caller's pid; a callable is asked once, when a call is first recorded (finding a
        peer's process costs a scan of ``/proc``, a read needs none)."""
        return self._pid if isinstance(self._pid, int) else self._pid()

    def execute(self, request: FakeRequest) -> Answer:
        """Process one request over HTTP (claim, latency, execute), under the armed connection fault."""
        fault = self.faults.take(request.provider, request.op) if self.faults is not None else None
        if fault == "reset":
            raise Reset(f"{request.provider}.{request.op}")
        if self.context is not None and request.context is None:
            request = replace(request, context=self.context)
        answer = process(self.ledger, request, attempt=self.attempt, pid=self.pid, split=True)
        if fault == "drop":
            assert self.faults is not None
            time.sleep(self.faults.hold_s)  # the provider committed; the caller waits for nothing
            answer = replace(answer, fault="drop")
        return answer

    def serve(self, method: Callable[[], Any]) -> tuple[Answer | None, Any]:
        """Run a provider method as the server serves it: its one request's answer (for the route to
        render), or None and the method's result for a read.  The method sees what a client
        library would (the body, or the error raised), as in process."""
        self._answers.clear()
        try:
            result = method()
        except FakeProviderError:
            if not self._answers:
                raise  # refused before any request was made (a bad argument, a stale fence)
            return self._answers[0], None
        return (self._answers[0] if self._answers else None), result

    def _run(self, request: FakeRequest) -> dict[str, Any]:
        if self._answers:
            made = self._answers[0].call
            raise FakeProviderError(
                f"{request.provider}.{request.op}: a served provider method makes one request"
                f" ({made.provider}.{made.op} was made already)"
            )
        answer = self.execute(request)
        self._answers.append(answer)
        return result_of(answer)

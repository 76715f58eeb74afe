"""The handle an agent holds: :class:`Fakes` (every registered fake on one ledger, thread and
attempt) and :func:`connect`, which builds it from the supervisor's environment."""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import tempfile
import threading
from typing import TYPE_CHECKING, Any

from killdrill import envvars
from killdrill.agent import await_decisions, boundary, runtime_context
from killdrill.fakes.errors import IndeterminateError
from killdrill.fakes.locate import adopt, fill
from killdrill.fakes.processing import Answer, FakeRequest, process
from killdrill.fakes.provider import Provider, fake_classes
from killdrill.ledger import Ledger
from killdrill.providers import load_entry_points

if TYPE_CHECKING:
    from killdrill.fakes.builtin import KV, Counter, Inventory, Mailbox, Payments, Tickets, Webhooks


class Fakes:
    """One handle per agent process: every registered fake, on one ledger, thread and attempt.

    A fake is an attribute named after its provider (``fakes.payments``) or ``fakes.provider(name)``;
    a provider defined after the handle was made is found too (its class is looked up on first use).
    """

    # The built-in fakes, typed for callers; the instances are made on first use from the registry.
    payments: Payments
    mailbox: Mailbox
    tickets: Tickets
    webhooks: Webhooks
    counter: Counter
    kv: KV
    inventory: Inventory

    def __init__(self, ledger: Ledger, attempt: int = 1) -> None:
        self.ledger = ledger
        self.thread = ledger.thread
        self.attempt = attempt
        self._fakes: dict[str, Provider] = {}

    def __repr__(self) -> str:
        return f"Fakes({self.ledger!r}, attempt={self.attempt})"

    def provider(self, name: str) -> Provider:
        """A fake by name (``payments``, ``mailbox``, ...); KeyError if there is none."""
        fake = self._fakes.get(name)
        if fake is None:
            cls = fake_classes().get(name)
            if cls is None:
                load_entry_points()  # a provider another package declares, not imported yet
                cls = fake_classes().get(name)
            if cls is None:
                raise KeyError(name)
            fake = self._fakes.setdefault(name, cls(self))
        return fake

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: a provider's name.
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.provider(name)
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no fake provider {name!r}") from None

    def _run(self, request: FakeRequest) -> dict[str, Any]:
        """In-process: one atomic transaction, then ``during:``, then the answer or its exception."""
        await_decisions()  # another thread at a kill point: land after the supervisor's answer
        context = runtime_context()
        if context is not None:  # an integration's runtime context (a durable runtime's own attempt)
            request = dataclasses.replace(request, context=context)
        answer = process(self.ledger, request, attempt=self.attempt, pid=os.getpid())
        boundary(f"during:{request.provider}.{request.op}")
        return result_of(answer)


def result_of(answer: Answer) -> dict[str, Any]:
    """What a provider method returns for ``answer``, as a client library would: the body, or
    the error raised (a lost response is an ``IndeterminateError``: it happened, nobody was told)."""
    if answer.fault is not None:
        raise IndeterminateError(
            f"{answer.call.provider}.{answer.call.op}: the request was executed ({answer.call.effect_id})"
            f" but the response was lost ({answer.fault})",
            call=answer.call,
        )
    if answer.error is not None:
        answer.error.call = answer.call
        raise answer.error
    return {**answer.body, "replayed": answer.replayed}


_temp_dir: str | None = None
_temp_lock = threading.Lock()
_TEMP_PREFIX = "killdrill-fakes-"


def _temporary_ledger() -> str:
    """A ledger for a run by hand (no drill): one per process, removed when the process exits;
    a folder whose process died before (killed, no exit handlers) is removed by the next one."""
    global _temp_dir
    with _temp_lock:
        if _temp_dir is None:
            _sweep(tempfile.gettempdir())
            _temp_dir = tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{os.getpid()}-")
            atexit.register(shutil.rmtree, _temp_dir, True)
        return os.path.join(_temp_dir, "ledger.sqlite")


def _sweep(tmp: str) -> None:
    """Remove this user's temporary ledgers whose process is gone (named ``PREFIX-PID-...``)."""
    try:
        names = [n for n in os.listdir(tmp) if n.startswith(_TEMP_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(_TEMP_PREFIX) :].partition("-")[0]
        path = os.path.join(tmp, name)
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        try:
            if os.stat(path).st_uid == os.getuid():
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def connect(
    ledger: str | os.PathLike[str] | Ledger | None = None,
    *,
    thread: str | None = None,
    attempt: int | None = None,
) -> Fakes:
    """The fakes of this run: ledger, thread and attempt default to the supervisor's environment
    (or the agent's, when what started it stripped this one: :mod:`killdrill.fakes.locate`)."""
    if isinstance(ledger, Ledger):
        if thread is not None and thread != ledger.thread:
            ledger = Ledger(ledger.url, thread)
    else:
        adopt()  # what started us stripped the drill's variables: the nearest ancestor that has them
        if ledger is not None:
            ledger = fill(os.fspath(ledger))  # --ledger {KILLDRILL_LEDGER}
        where = ledger if ledger is not None else os.environ.get(envvars.LEDGER) or _temporary_ledger()
        ledger = Ledger(where, thread or os.environ.get(envvars.THREAD) or "default")
    if attempt is None:
        attempt = int(os.environ.get(envvars.ATTEMPT) or 1)
    return Fakes(ledger, attempt)

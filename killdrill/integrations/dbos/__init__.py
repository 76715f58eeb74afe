"""DBOS integration: kill points for every step and workflow of an unmodified DBOS agent.

Activated by the drill with ``--integration dbos`` (``KILLDRILL_INTEGRATIONS=dbos``; the
bootstrap's ``sitecustomize`` calls :func:`activate`).  Activation never imports DBOS: an import
hook patches ``dbos._core`` and ``dbos._dbos`` when the agent imports ``dbos``.

Points emitted (``STEP`` / ``WORKFLOW`` is the name DBOS records: the ``name=`` given to
``@DBOS.step``/``@DBOS.workflow``, else the function's ``__qualname__``; characters outside the
kill-point grammar become ``_``):

``before:WORKFLOW``
    the workflow's status row is committed (PENDING) and its body is about to run; again on
    recovery, when DBOS re-runs the body.
``before:STEP``
    the step function is about to be called (each retry attempt is another occurrence).
``after:STEP``
    the step function returned; its result is not recorded yet: a kill here re-runs the step.
``committed:STEP``
    DBOS's ``record_operation_result`` for the step committed (the step's row in
    ``operation_outputs``): a kill here replays the step from its record.
``after:WORKFLOW`` / ``committed:WORKFLOW``
    the body returned / the workflow's SUCCESS outcome committed.

A step that DBOS replays from its record (``check_existing_result``) never calls the function,
so it emits nothing: it is not a new ``before:``.  The trace holds points only, so the replay is
said on the agent's stderr (``killdrill: dbos: replayed step ...``, in ``attempt-N.stderr``).

On ``DBOS.launch()`` DBOS recovers only the pending workflows of *its own* application version
(a hash of the workflow source unless ``DBOSConfig`` sets ``application_version``).  When this
process leaves pending workflows of another version alone, the integration writes one
:mod:`killdrill.integrations._findings` line naming them, so a drill whose resume then waits
forever reports that cause instead of a bare ``hang``.

Every call a fake answers carries the runtime context (:func:`killdrill.agent.in_runtime`):
``{"runtime": "dbos", "unit": "step", "name": STEP, "run": WORKFLOW_ID}`` inside a step,
``"unit": "workflow"`` in a workflow's body outside any step.  :func:`causes` reads it: an effect
repeated from a workflow's body ran outside a step, and DBOS re-runs the body on recovery; the
verdict's ``work_resubmitted`` reads ``run``: the same steps in a workflow a clean run has not.

Steps run on DBOS's executor threads: :func:`killdrill.agent.boundary` keeps a connection per
thread, so a point held on one thread does not stall another.

With ``--answer`` a workflow waiting in ``DBOS.recv`` is sent the scripted human's answer
(:mod:`killdrill.integrations.dbos.answers`).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from killdrill.agent import armed, boundary, in_runtime
from killdrill.integrations import Cause, Integration, Probe, _answers
from killdrill.integrations._findings import finding_line
from killdrill.integrations._imports import PatchOnImport
from killdrill.integrations.dbos.work import (
    recovered,
    working,
    wrap_await_result,
    wrap_launch,
    wrap_queue_worker,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from killdrill.records import Attempt, Violation

__all__ = [
    "INTEGRATION",
    "OUTSIDE_STEP_CAUSE",
    "VERSION_CAUSE",
    "activate",
    "active",
    "causes",
    "deactivate",
    "point_name",
]

OUTSIDE_STEP_CAUSE = "effect_outside_step"
"""The cause of an effect repeated from a workflow's body, outside any ``@DBOS.step``."""
OUTSIDE_STEP_FIX = (
    "move the call into a @DBOS.step (DBOS records a step's output and replays it on recovery "
    "instead of calling it again) and send it with an idempotency key derived from the workflow "
    "id and the step (killdrill.effects.idempotency_key(...)): a kill between the call and the "
    "step's record still re-runs the step"
)


def causes(v: Violation, attempts: Sequence[Attempt]) -> Cause | None:
    """An effect repeated by calls made in a workflow's body outside any step (their runtime
    context says ``unit: workflow``): DBOS re-runs the body on recovery, so the call ran again."""
    if v.kind not in ("duplicate_effect", "key_changed"):
        return None
    where = [c.context for c in v.calls if c.context and c.context.get("runtime") == "dbos"]
    outside = sorted({str(w.get("name")) for w in where if w.get("unit") == "workflow"})
    if not outside:
        return None
    attempts_seen = sorted({c.attempt for c in v.calls})
    return Cause(
        OUTSIDE_STEP_CAUSE,
        f"the call ran in the body of workflow {', '.join(outside)}, outside any @DBOS.step, in attempts "
        f"{', '.join(map(str, attempts_seen))}: DBOS re-runs a workflow's body on recovery, so each "
        "recovery sent it again",
        OUTSIDE_STEP_FIX,
    )


REMOVED = (
    "the internal queue's first poll after the startup recovery (up to 1 s)",
    "get_result's polling of a workflow the same process runs (1 s)",
)
"""DBOS's waits this integration removes under a drill (integrations.dbos.work), said with each wait."""


def waits(timeline: Sequence[tuple[float, Attempt]], clean: Attempt) -> list[dict[str, Any]]:
    """What DBOS held after a kill, read from the attempts: a recovered workflow's body started
    later after the resume's start than the clean run's did, or the resume outlived its last point
    by more than the clean run did (a handle polling for a result).  Under a drill DBOS polls for
    neither in the same process (``REMOVED``): what is left is DBOS's launch and a result read
    from another process."""
    if not clean.trace or any(a.process is not None for _, a in timeline):
        return []  # a deployment's clean run is every process's at once: not this yardstick
    first, tail = clean.trace[0], (clean.duration_ms - clean.trace[-1].t_ms) / 1000.0
    out: list[dict[str, Any]] = []
    for (_, killed), (began, resume) in itertools.pairwise(timeline):
        if killed.killed_at is None or not resume.trace or resume.killed_at is not None:
            continue
        body = resume.trace[0]
        late = (body.t_ms - first.t_ms) / 1000.0 if body.point == first.point else 0.0
        name = first.point.partition(":")[2]
        if late > 0:
            out.append(
                {
                    "label": f"DBOS's recovery of workflow {name} (from the resume's start to the"
                    " recovered body's)",
                    "setting": "launch",
                    "unit": f"workflow {name}",
                    "from": began + first.t_ms / 1000.0,
                    "to": began + body.t_ms / 1000.0,
                    "kept": "DBOS's launch (its system database, the recovery's query and re-enqueue)",
                    "removed": list(REMOVED),
                }
            )
        end = (resume.duration_ms - resume.trace[-1].t_ms) / 1000.0
        if end - tail > 0:
            at = began + resume.duration_ms / 1000.0 - tail
            out.append(
                {
                    "label": f"DBOS's result of recovered workflow {name} (polling_interval_sec, 1 s"
                    " unless the agent passes one)",
                    "setting": "polling_interval_sec",
                    "setting_s": 1.0,
                    "unit": f"workflow {name}",
                    "from": at - (end - tail),
                    "to": at,
                    "kept": "get_result's polling of a workflow another process runs",
                    "removed": list(REMOVED),
                }
            )
    return out


INTEGRATION = Integration(
    "dbos",
    title="DBOS",
    distributions=("dbos",),
    modules=("dbos",),
    hint="step and workflow, before and after DBOS records it",
    # A fork template imports these once; DBOS starts no thread before DBOS(...) / launch().
    preload=("dbos", "sqlalchemy"),
    causes=causes,
    waits=waits,
    probe=Probe(
        "killdrill.conform.probes.dbos_probe",
        order=5,
        distribution="dbos",
        extra="dbos",
        committed_means="DBOS recorded the step's output (operation_outputs)",
    ),
    examples=("killdrill.examples.payout_dbos", "killdrill.examples.pydantic_ai_dbos"),
    answers=True,
)
VERSION_CAUSE = "dbos_application_version"
"""The finding's cause when a resumed process leaves another version's workflows pending."""

_CORE = "dbos._core"
_DBOS = "dbos._dbos"
_SYSDB = "dbos._sys_db"
_QUEUE = "dbos._queue"
_TARGETS = (_CORE, _DBOS, _SYSDB, _QUEUE)
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.\-/\[\]]")
_TEMP = "<temp>."  # DBOS's own wrapper workflows around a step started on its own
_lock = threading.RLock()


def point_name(name: str) -> str | None:
    """The kill-point NAME for a DBOS step or workflow name, or None for DBOS's own wrappers."""
    if not name or name.startswith(_TEMP):
        return None
    name = _BAD_CHARS.sub("_", name)
    return name if name[:1] not in ("", ".", "-", "/", "[", "]") else f"_{name}"


def _say(text: str) -> None:
    """One line on stderr, under a drill only (the trace carries points, not notes)."""
    if armed():
        try:
            sys.stderr.write(f"killdrill: dbos: {text}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


# ---------------------------------------------------------------- steps


def _settle(ran: list[bool], committed: str, replayed: Callable[[str], None]) -> None:
    if ran:
        boundary(committed)
    else:
        replayed("its recorded output")


def _wrap_invoke_step(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def invoke_step(
        dbos: Any, step_ctx: Any, func: Callable[..., Any], args: Any, kwargs: Any, **options: Any
    ) -> Any:
        name = point_name(str(options.get("step_name", "")))
        if name is None:
            return orig(dbos, step_ctx, func, args, kwargs, **options)
        ran: list[bool] = []  # the function was called (not replayed from its record)
        run_id = getattr(step_ctx, "workflow_id", None)  # the workflow this step is part of
        before, after, committed = f"before:{name}", f"after:{name}", f"committed:{name}"
        body: Callable[..., Any]
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_body(*a: Any, **k: Any) -> Any:
                ran.append(True)
                with in_runtime(runtime="dbos", unit="step", name=name, run=run_id):
                    boundary(before)
                    result = await func(*a, **k)
                    boundary(after)
                return result

            body = async_body
        else:

            @functools.wraps(func)
            def sync_body(*a: Any, **k: Any) -> Any:
                ran.append(True)
                with in_runtime(runtime="dbos", unit="step", name=name, run=run_id):
                    boundary(before)
                    result = func(*a, **k)
                    boundary(after)
                return result

            body = sync_body

        def replayed(how: str) -> None:
            _say(
                f"replayed step {name} ({how}) from its record: workflow "
                f"{getattr(step_ctx, 'workflow_id', '?')}, step #{getattr(step_ctx, 'function_id', '?')}"
            )

        try:
            out = orig(dbos, step_ctx, body, args, kwargs, **options)
        except Exception:
            if not ran:
                replayed("its recorded error")
            raise
        if inspect.iscoroutine(out):

            async def settle() -> Any:
                try:
                    result = await out
                except Exception:
                    if not ran:
                        replayed("its recorded error")
                    raise
                _settle(ran, committed, replayed)
                return result

            return settle()
        _settle(ran, committed, replayed)
        return out

    return invoke_step


# ---------------------------------------------------------------- workflows


def _workflow_name(func: Callable[..., Any]) -> str | None:
    target = func.func if isinstance(func, functools.partial) else func
    registered = getattr(target, "dbos_function_name", None)
    return point_name(registered) if isinstance(registered, str) else None


def _workflow_id() -> str | None:
    """The id of the workflow running now (its body's calls record it as their ``run``)."""
    try:
        wid = sys.modules["dbos"].DBOS.workflow_id
    except Exception:  # no DBOS context here: the call records no run
        return None
    return wid if isinstance(wid, str) else None


def _wrap_dropping(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``_dropping_datasource_checkpoints`` wraps every workflow body (direct call, start, recovery)."""

    @functools.wraps(orig)
    def dropping(dbos: Any, func: Callable[..., Any]) -> Any:
        run = orig(dbos, func)
        name = _workflow_name(func)
        if name is None:
            return run
        before, after = f"before:{name}", f"after:{name}"
        if inspect.iscoroutinefunction(run):

            @functools.wraps(run)
            async def run_async() -> Any:
                wid = _workflow_id()
                with in_runtime(runtime="dbos", unit="workflow", name=name, run=wid), working(wid, name):
                    boundary(before)
                    result = await run()
                    boundary(after)
                return result

            return run_async

        @functools.wraps(run)
        def run_sync() -> Any:
            wid = _workflow_id()
            with in_runtime(runtime="dbos", unit="workflow", name=name, run=wid), working(wid, name):
                boundary(before)
                result = run()
                boundary(after)
            return result

        return run_sync

    return dropping


def _wrap_wf_invoke(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``_get_wf_invoke_func`` builds the step that records a workflow's outcome."""

    @functools.wraps(orig)
    def get_wf_invoke_func(dbos: Any, status: Any, *rest: Any, **kw: Any) -> Any:
        persist = orig(dbos, status, *rest, **kw)
        name = point_name(str(status.get("name") or ""))
        if name is None:
            return persist

        @functools.wraps(persist)
        def persist_and_announce(func: Callable[[], Any]) -> Any:
            done_before = status.get("status") in ("SUCCESS", "ERROR")
            result = persist(func)
            from dbos._outcome import DeferredResult  # imported by dbos._core already

            if not done_before and not isinstance(result, DeferredResult):
                boundary(f"committed:{name}")
            return result

        return persist_and_announce

    return get_wf_invoke_func


# ---------------------------------------------------------------- the version rule


def _other_versions(dbos: Any) -> list[tuple[str, str]]:
    """(workflow id, application version) of this executor's unfinished workflows of another version."""
    import sqlalchemy as sa  # a dependency of dbos, imported by it already
    from dbos._utils import GlobalParams

    sysdb = dbos._sys_db
    table = sysdb.tables.workflow_status
    with sysdb.engine.begin() as conn:
        rows = conn.execute(
            sa.select(table.c.workflow_uuid, table.c.application_version).where(
                table.c.status.in_(("PENDING", "ENQUEUED")),
                table.c.executor_id == GlobalParams.executor_id,
                table.c.application_version != GlobalParams.app_version,
            )
        ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _wrap_startup_recovery(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def startup_recovery_thread(dbos: Any, pending: Any, *rest: Any, **kw: Any) -> Any:
        if armed():
            try:
                stranded = _other_versions(dbos)
            except Exception as exc:  # never break the agent's recovery for a diagnosis
                _say(f"could not check for workflows of other application versions: {exc}")
                stranded = []
            if stranded:
                from dbos._utils import GlobalParams

                ids = ", ".join(f"{wid} (version {ver})" for wid, ver in stranded[:5])
                finding_line(
                    VERSION_CAUSE,
                    f"DBOS did not recover {len(stranded)} pending workflow(s): {ids}, because this "
                    f"process runs application version {GlobalParams.app_version} and DBOS recovers "
                    "only workflows of its own version (a hash of the workflow source unless "
                    "DBOSConfig sets application_version); to resume across an upgrade, pin "
                    "application_version or fork the workflow to the new version",
                )
        try:
            return orig(dbos, pending, *rest, **kw)
        finally:
            recovered()  # the internal queue's worker polls now (integrations.dbos.work)

    return startup_recovery_thread


# ---------------------------------------------------------------- patching


def _patch(module: ModuleType) -> None:
    """Patch one target module, once (right after it executes, before anyone calls into it)."""
    with _lock:
        if module.__name__ == _CORE and (module, "invoke_step") not in _originals:
            _replace(module, "invoke_step", _wrap_invoke_step(module.invoke_step))
            _replace(
                module,
                "_dropping_datasource_checkpoints",
                _wrap_dropping(module._dropping_datasource_checkpoints),
            )
            _replace(module, "_get_wf_invoke_func", _wrap_wf_invoke(module._get_wf_invoke_func))
        elif module.__name__ == _SYSDB:
            owner = module.SystemDatabase
            for attr in ("await_workflow_result", "await_workflow_result_async"):
                if (owner, attr) not in _originals and hasattr(owner, attr):
                    _replace(owner, attr, wrap_await_result(getattr(owner, attr), module.NoResult))
            if not _answers.configured():
                return
            from killdrill.integrations.dbos.answers import wrap_recv_setup

            if (owner, "recv_setup") not in _originals:
                _replace(owner, "recv_setup", wrap_recv_setup(owner.recv_setup))
        elif module.__name__ == _DBOS and (module, "startup_recovery_thread") not in _originals:
            _replace(
                module, "startup_recovery_thread", _wrap_startup_recovery(module.startup_recovery_thread)
            )
            _replace(module.DBOS, "_launch", wrap_launch(module.DBOS._launch))
        elif module.__name__ == _QUEUE and (module, "queue_worker_thread") not in _originals:
            _replace(module, "queue_worker_thread", wrap_queue_worker(module.queue_worker_thread))


_hook = PatchOnImport(_TARGETS, _patch)
_replace = _hook.replace
_originals = _hook.originals  # (owner, attribute) -> what was there before the patch


def activate() -> None:
    """Emit kill points for every DBOS step and workflow in this process (idempotent).

    Patches DBOS now if it is already imported, otherwise when it is imported.  A module
    already imported has its functions replaced in place: callers inside DBOS look them up
    as module globals at call time, so the patch reaches them.
    """
    with _lock:
        _hook.install()


def active() -> bool:
    """True when :func:`activate` ran (patched, or waiting for DBOS's import)."""
    return _hook.active


def deactivate() -> None:
    """Undo :func:`activate` (for in-process tests)."""
    with _lock:
        _hook.undo()

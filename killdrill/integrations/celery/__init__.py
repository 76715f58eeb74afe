"""Celery integration: kill points for every task of an unmodified Celery worker.

Activated by the drill with ``--integration celery`` (``KILLDRILL_INTEGRATIONS=celery``: the
bootstrap's ``sitecustomize`` calls :func:`activate`), or explicitly with
``killdrill.integrations.celery.activate()``.  Activation never imports Celery or kombu: an
import hook patches them when the agent imports them.

Points emitted (``TASK`` is the task's name as written: the function's name, or the ``name=``
given to ``@app.task``; characters outside the kill-point grammar become ``_``):

``before:TASK``
    the worker is about to run the task's body (each delivery is another occurrence: a task
    the broker redelivers after a killed worker is ``before:TASK#2``).
``after:TASK``
    the body returned; the result is not stored and the message not acknowledged yet.
``committed:TASK``
    the broker has the worker's ack: kombu's ``Message.ack`` returned (Redis: the pipeline that
    removes the delivery from the ``unacked`` hash executed; AMQP: the ``basic.ack`` written to
    the connection, which AMQP 0-9-1 never confirms), not when Celery's ``Request.acknowledge``
    schedules it for the event loop's next turn.  On Redis the point also waits until the
    worker has read a pending ``BRPOP`` reply that may hold a message (:mod:`.acks`: held with
    one unread, the message Redis popped into it would be in no key).  With ``acks_late=True`` that is after
    the body returned; without it Celery acknowledges on receipt, so ``committed:TASK`` comes
    *before* ``before:TASK`` and a kill during the body loses the task (at-most-once).
``during:redis.brpop`` (``--pop-window``, Redis only)
    Redis popped a message for the worker and kombu has not yet written it to ``unacked``: a kill
    there loses the message whatever the task does (cause ``redis_pop_window``).

Every fake call of a task's body is recorded with the task's name, id, Celery's retry count,
the broker's redelivered flag and the worker's hostname (:func:`killdrill.agent.in_runtime`),
so a duplicate names the deliveries that landed it.

Isolation, set by the harness's service (:mod:`killdrill.integrations.celery.broker`; the names
it shares with the patches: :mod:`.settings`) through the
environment of every process of a case: ``CELERY_BROKER_URL`` and ``CELERY_RESULT_BACKEND``
(Celery reads them before the app's own configuration), and on Redis
``KILLDRILL_CELERY_KEYPREFIX``, put in front of every key kombu and the Redis result backend
use (kombu's ``global_keyprefix``, the backend's key prefixes; prepended to the app's own
prefix if it sets one), and ``KILLDRILL_CELERY_VISIBILITY_TIMEOUT`` (the drill's
``--visibility-timeout``, 3 s by default), the seconds after which
Redis hands a killed worker's unacknowledged task to the next worker (kombu's default is 3600;
an app's own smaller value is kept), swept every second.  A live worker keeps its
unacknowledged deliveries fresh (every third of that timeout), so only a dead worker's task is
handed on: a long task body is not delivered twice because the timeout is short.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from killdrill.agent import boundary, in_runtime
from killdrill.integrations import Integration, Service, ServiceHost
from killdrill.integrations.celery import acks
from killdrill.integrations.celery.causes import causes
from killdrill.integrations.celery.settings import (
    KEYPREFIX_ENV,
    OPTIONS,
    POP_WINDOW_ENV,
    VISIBILITY_ENV,
)

if TYPE_CHECKING:
    from pathlib import Path
from killdrill.integrations._imports import PatchOnImport

__all__ = [
    "INTEGRATION",
    "KEYPREFIX_ENV",
    "POP_WINDOW_ENV",
    "VISIBILITY_ENV",
    "activate",
    "active",
    "deactivate",
    "point_name",
    "task_point_name",
]


def service(root: Path, host: ServiceHost, options: object = None) -> Service:
    """The drill's broker isolation (imported here, harness side only: the agent never calls this)."""
    from killdrill.integrations.celery.broker import CeleryBroker

    return CeleryBroker(root, options, host)


INTEGRATION = Integration(
    "celery",
    title="Celery",
    distributions=("celery",),
    modules=("celery",),
    hint="task",
    preload=("celery", "celery.app.trace", "kombu.transport.redis"),
    service=service,
    examples=("killdrill.examples.checkout_celery",),
    options=OPTIONS,
    causes=causes,
)

_TRACE = "celery.app.trace"
_REQUEST = "celery.worker.request"
_BACKEND = "celery.backends.base"
_REDIS = "kombu.transport.redis"
_MESSAGE = "kombu.message"
_TARGETS = (_TRACE, _REQUEST, _BACKEND, _REDIS, _MESSAGE)
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.\-/\[\]]")
_WRAPPED = "_killdrill_wrapped"
_lock = threading.RLock()


def point_name(name: str) -> str:
    """The kill-point NAME for a task name (odd characters become ``_``)."""
    out = _BAD_CHARS.sub("_", name)
    return out if out[:1] not in ("", ".", "-", "/", "[", "]") else f"_{out}"


def task_point_name(task: Any) -> str:
    """The task's name as written: the function's name when Celery generated the task's name from
    it (``tasks.charge_order`` for ``def charge_order``), else the ``name=`` given."""
    name = str(task.name)
    run = getattr(task, "run", None)
    run = getattr(run, "__wrapped__", run)
    fn, module = getattr(run, "__name__", None), getattr(run, "__module__", None)
    if fn and module:
        try:
            generated = task.app.gen_task_name(fn, module)
        except Exception:  # an app whose own gen_task_name fails: the registered name stands
            generated = None
        if generated == name:
            name = fn
    return point_name(name)


def _context(task: Any, name: str) -> dict[str, Any]:
    """What Celery knows of the delivery now running (JSON values only)."""
    request = task.request
    delivery = getattr(request, "delivery_info", None) or {}
    return {
        "runtime": "celery",
        "unit": "task",
        "name": name,
        "attempt": int(getattr(request, "retries", 0) or 0) + 1,
        "id": getattr(request, "id", None),
        "redelivered": bool(delivery.get("redelivered")),
        "worker": getattr(request, "hostname", None),
    }


def _wrap_run(task: Any, run: Callable[..., Any]) -> Callable[..., Any]:
    """The task's body between ``before:`` and ``after:``, its fake calls under the task's context."""

    @functools.wraps(run)
    def body(*args: Any, **kwargs: Any) -> Any:
        name = task_point_name(task)
        boundary(f"before:{name}")
        acks.starting(task, str(getattr(getattr(task, "request", None), "id", "") or ""))
        with in_runtime(**_context(task, name)):
            result = run(*args, **kwargs)
        boundary(f"after:{name}")
        return result

    setattr(body, _WRAPPED, True)
    return body


def _wrap_build_tracer(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``build_tracer(name, task, ...)`` reads ``task.run`` once: wrap it on the task object first,
    so both paths (the body called directly, or through a task class's own ``__call__``) pass."""

    @functools.wraps(orig)
    def build_tracer(name: Any, task: Any, *args: Any, **kwargs: Any) -> Any:
        with _lock:
            run = getattr(task, "run", None)
            if run is not None and not getattr(run, _WRAPPED, False):
                task.run = _wrap_run(task, run)
        return orig(name, task, *args, **kwargs)

    return build_tracer


def _wrap_keyprefix(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The result backend's key prefixes, the case's prefix in front (Redis-like backends)."""

    @functools.wraps(orig)
    def _add_global_keyprefix(self: Any) -> Any:
        out = orig(self)
        prefix = os.environ.get(KEYPREFIX_ENV)
        if prefix and "redis" in type(self).__module__:
            for attr in ("task_keyprefix", "group_keyprefix", "chord_keyprefix"):
                value = getattr(self, attr)
                text = value.decode() if isinstance(value, bytes) else str(value)
                setattr(self, attr, prefix + text)
        return out

    return _add_global_keyprefix


def _patch_redis_channel(channel: Any) -> None:
    """kombu's Redis channel: the case's key prefix in front of the app's own, and the case's
    visibility timeout (an app's smaller one kept), swept every second.  Read from the
    environment when a channel opens, so a fork template patched before a case still isolates it."""
    default_prefix = channel.__dict__.get("global_keyprefix", "")
    default_timeout = channel.__dict__.get("visibility_timeout", 3600)
    default_throttle = channel.__dict__.get("unacked_restore_throttle", 10)

    def get_prefix(self: Any) -> str:
        own = str(self.__dict__.get("_killdrill_keyprefix", default_prefix))
        return os.environ.get(KEYPREFIX_ENV, "") + own

    def set_prefix(self: Any, value: str) -> None:
        self.__dict__["_killdrill_keyprefix"] = value

    def get_timeout(self: Any) -> float:
        own = float(self.__dict__.get("_killdrill_visibility", default_timeout))
        case = os.environ.get(VISIBILITY_ENV)
        return min(float(case), own) if case else own

    def set_timeout(self: Any, value: float) -> None:
        self.__dict__["_killdrill_visibility"] = value

    def sweep(attr: str, default: int) -> property:
        def get(self: Any) -> Any:
            return 1 if os.environ.get(VISIBILITY_ENV) else self.__dict__.get(f"_killdrill_{attr}", default)

        def set_(self: Any, value: Any) -> None:
            self.__dict__[f"_killdrill_{attr}"] = value

        return property(get, set_)

    _replace(channel, "global_keyprefix", property(get_prefix, set_prefix))
    _replace(channel, "visibility_timeout", property(get_timeout, set_timeout))
    # The sweep's timer reads the class attribute (a number) when a worker starts: every second,
    # and each sweep scans only when the throttle (per channel: 1 in a case, else the app's) lets it.
    _replace(channel, "unacked_restore_interval", 1)
    _replace(channel, "unacked_restore_throttle", sweep("unacked_restore_throttle", default_throttle))


def _beat(qos: Any, period: float) -> None:
    """Keep this worker's unacknowledged deliveries fresh in Redis's unacked index while it lives,
    so the short visibility timeout hands on a task only after its worker died, never while a
    live worker runs a long body.  ``xx``: a delivery acknowledged meanwhile is not put back."""
    while True:
        time.sleep(period)
        tags = list(getattr(qos, "_delivered", {}) or ())
        if not tags:
            continue
        # a broker gone for a moment: the next beat retries
        with contextlib.suppress(Exception), qos.channel.conn_or_acquire() as client:
            client.zadd(qos.unacked_index_key, dict.fromkeys(tags, time.time()), xx=True)


def _wrap_append(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def append(self: Any, message: Any, delivery_tag: Any) -> Any:
        out = orig(self, message, delivery_tag)
        timeout = os.environ.get(VISIBILITY_ENV)
        if timeout and not getattr(self, "_killdrill_beat", False):
            self._killdrill_beat = True
            period = max(0.2, float(timeout) / 3)
            threading.Thread(
                target=_beat, args=(self, period), name="killdrill-celery-beat", daemon=True
            ).start()
        return out

    return append


def _patch(module: ModuleType) -> None:
    """Patch one of the target modules, once (called right after it executes)."""
    with _lock:
        if module.__name__ == _TRACE:
            if (module, "build_tracer") not in _originals:
                _replace(module, "build_tracer", _wrap_build_tracer(module.build_tracer))
        elif module.__name__ == _REQUEST:
            owner: Any = module.Request
            if (owner, "acknowledge") not in _originals:
                _replace(owner, "acknowledge", acks.wrap_acknowledge(owner.acknowledge, task_point_name))
        elif module.__name__ == _MESSAGE:
            if (module.Message, "ack") not in _originals:
                _replace(module.Message, "ack", acks.wrap_ack(module.Message.ack))
        elif module.__name__ == _BACKEND:
            owner = module.BaseKeyValueStoreBackend
            if (owner, "_add_global_keyprefix") not in _originals:
                _replace(owner, "_add_global_keyprefix", _wrap_keyprefix(owner._add_global_keyprefix))
        elif module.__name__ == _REDIS and (module.Channel, "global_keyprefix") not in _originals:
            _patch_redis_channel(module.Channel)
            _replace(module.QoS, "append", _wrap_append(module.QoS.append))
            _replace(module.Channel, "_brpop_read", acks.wrap_brpop_read(module.Channel._brpop_read))
            _replace(module.Channel, "close", acks.wrap_close(module.Channel.close))
            _replace(module.Transport, "_deliver", acks.wrap_deliver(module.Transport._deliver))


_hook = PatchOnImport(_TARGETS, _patch)
_replace = _hook.replace
_originals = _hook.originals  # (owner, attribute) -> what was there before the patch


def activate() -> None:
    """Emit kill points for every Celery task run in this process (idempotent)."""
    with _lock:
        _hook.install()


def active() -> bool:
    """True when :func:`activate` ran (patched, or waiting for Celery's import)."""
    return _hook.active


def deactivate() -> None:
    """Undo :func:`activate` (for in-process tests; tasks whose tracer was built keep their
    wrapped body, which emits nothing outside a drill)."""
    with _lock:
        _hook.undo()

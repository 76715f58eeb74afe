"""The Celery broker and result backend of each case and clean run (harness side only).

``--integration celery`` gives every process of a run ``CELERY_BROKER_URL`` and
``CELERY_RESULT_BACKEND`` of its own, so two runs never share a queue, a task id or a result:
clean runs reuse a thread id, and a submitter that names its task after its thread would
otherwise find the previous run's result.

- Redis (the default, ``redis://127.0.0.1:6379/0``, or ``--broker redis://...``): one database
  number is all a URL can choose, and there are 16; so each run gets a key prefix instead
  (``KILLDRILL_CELERY_KEYPREFIX``), which the agent side puts in front of every key kombu and the
  Redis result backend write, and a visibility timeout of a few seconds
  (``--visibility-timeout``, 3 s by default, passed to the workers as
  ``KILLDRILL_CELERY_VISIBILITY_TIMEOUT``: Redis hands a killed worker's unacknowledged task on
  after it, where kombu's default waits 3600 s).  Released: every key under the prefix deleted.
- RabbitMQ (``--broker amqp://USER:PASS@HOST:PORT/``): a virtual host per run, made and deleted
  with ``rabbitmqctl`` (AMQP cannot make one; every queue, exchange and binding of the run lives
  in it and goes with it).  The result backend is a SQLite database in the run's workdir
  (``db+sqlite://``): Celery's ``rpc://`` backend sends a result to the client that submitted
  the task, so a submitter killed and re-run would wait for it forever.

A broker that does not answer is a one-line :class:`~killdrill.errors.HarnessError` naming its
URL.  :meth:`CeleryBroker.explain_hang` says what the broker still holds for a run that hung.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from killdrill import envvars, ownership
from killdrill.errors import HarnessError, UsageError
from killdrill.integrations import ServiceHost, option_value
from killdrill.integrations.celery.settings import (
    KEYPREFIX_ENV,
    OPTIONS,
    POP_WINDOW_ENV,
    VISIBILITY_ENV,
)
from killdrill.isolation import isolated
from killdrill.records import Attempt

__all__ = ["DEFAULT_BROKER", "CeleryBroker", "keyprefix_for", "vhost_for"]

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
_REDIS = ("redis", "rediss")
_AMQP = ("amqp", "pyamqp", "amqps")
_CONNECT_TIMEOUT_S = 3.0


def _digest(workdir: Path) -> str:
    return hashlib.sha256(str(workdir).encode()).hexdigest()[:12]


def keyprefix_for(workdir: Path) -> str:
    """The Redis key prefix of one run (unique by the workdir's path)."""
    return f"killdrill-{_digest(workdir)}:"


def vhost_for(workdir: Path) -> str:
    """The RabbitMQ virtual host of one run (readable, and unique by the workdir's path)."""
    slug = re.sub(r"[^A-Za-z0-9-]+", "-", workdir.name).strip("-")[:40] or "run"
    return f"killdrill-{slug}-{_digest(workdir)}"


def _redacted(url: str) -> str:
    """``url`` without its password (said in errors)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass
class _Run:
    """What one run holds in the broker."""

    env: dict[str, str]
    keyprefix: str = ""
    vhost: str = ""
    claim: str = ""  # killdrill.ownership: swept by the next run if this harness dies


class CeleryBroker:
    """The broker of one drill: :meth:`env` isolates a run on first use, :meth:`release` removes
    everything it left, :meth:`close` whatever is still there."""

    def __init__(self, root: Path, options: Any = None, host: ServiceHost | None = None) -> None:
        self.root = Path(root).absolute()
        self.host = host  # runs rabbitmqctl contained: it dies with the harness, never adds after it
        self.url = str(option_value(OPTIONS, options, "broker") or DEFAULT_BROKER)
        self.scheme = urlsplit(self.url).scheme
        if self.scheme not in (*_REDIS, *_AMQP):
            raise UsageError(f"--broker {self.url}: expected a redis:// or amqp:// URL")
        self.pop_window = bool(option_value(OPTIONS, options, "pop_window"))
        if self.pop_window and self.scheme not in _REDIS:
            raise UsageError(
                f"--pop-window drills the Redis transport's BRPOP window; --broker {_redacted(self.url)} "
                "is AMQP, where a delivery stays on the broker until its ack (there is no such window)"
            )
        self.visibility_s = float(option_value(OPTIONS, options, "visibility_timeout"))
        self._runs: dict[Path, _Run] = {}
        self._lock = threading.Lock()
        self._checked = False
        self._redis: Any = None

    # ------------------------------------------------------------------ reaching the broker

    def _check_reachable(self) -> None:
        parts = urlsplit(self.url)
        default = 6379 if self.scheme in _REDIS else 5672
        host, port = parts.hostname or "127.0.0.1", parts.port or default
        try:
            socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise HarnessError(
                f"the Celery broker at {_redacted(self.url)} does not answer ({exc.strerror or exc}): "
                "start it, or point --broker at one that runs"
            ) from None

    def _client(self) -> Any:
        if self._redis is None:
            import redis  # celery[redis]: harness side, only with a Redis broker

            self._redis = redis.Redis.from_url(self.url, socket_connect_timeout=_CONNECT_TIMEOUT_S)
        return self._redis

    def _rabbitmqctl(self, *args: str) -> str:
        # the server's tools live in sbin, which a non-login PATH (cron, CI, sudo -u) often lacks
        sbin = os.pathsep.join(("/usr/local/sbin", "/usr/sbin", "/sbin"))
        ctl = shutil.which("rabbitmqctl", path=os.pathsep.join(filter(None, (os.environ.get("PATH"), sbin))))
        if ctl is None:
            raise HarnessError(
                f"--broker {_redacted(self.url)}: a virtual host per case needs rabbitmqctl on this machine "
                "(the RabbitMQ server's own tool), and none is on PATH"
            )
        code, stdout, stderr = self._run_contained([ctl, "-q", *args])
        if code != 0:
            said = (stderr or stdout).strip().splitlines()
            raise HarnessError(
                f"rabbitmqctl {' '.join(args)} failed for --broker {_redacted(self.url)}: "
                f"{said[-1] if said else f'exit {code}'}"
            )
        return stdout

    def _run_contained(self, argv: list[str], timeout_s: float = 60.0) -> tuple[int, str, str]:
        """Run ``argv`` to its end: under the harness's containment when a host was lent (an
        Erlang VM that outlived a killed harness added a vhost after the harness's claim was
        swept), else as a plain child."""
        env = isolated(envvars.without_drill(os.environ))
        if self.host is None:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
            )
            return done.returncode, done.stdout, done.stderr
        out = self.root / f".rabbitmqctl-{secrets.token_hex(6)}"
        stdout, stderr = Path(f"{out}.stdout"), Path(f"{out}.stderr")
        try:
            proc = self.host.spawn(argv, env=env, cwd=None, stdout=str(stdout), stderr=str(stderr))
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.host.kill(proc)
                proc.wait()
                raise
            except BaseException:  # Ctrl-C or SIGTERM: what it adds lands before the delete after it
                with contextlib.suppress(Exception):
                    proc.wait(timeout=timeout_s)
                raise
            return code, stdout.read_text(errors="replace"), stderr.read_text(errors="replace")
        finally:
            stdout.unlink(missing_ok=True)
            stderr.unlink(missing_ok=True)

    # ------------------------------------------------------------------ one run

    def _isolate(self, workdir: Path) -> _Run:
        if self.scheme in _REDIS:
            prefix = keyprefix_for(workdir)
            env = {
                "CELERY_BROKER_URL": self.url,
                "CELERY_RESULT_BACKEND": self.url,
                KEYPREFIX_ENV: prefix,
                VISIBILITY_ENV: f"{self.visibility_s:g}",
            }
            if self.pop_window:
                env[POP_WINDOW_ENV] = "1"
            claim = ownership.claim(ownership.REDIS_KEYS, url=self.url, prefix=prefix)
            return _Run(env, keyprefix=prefix, claim=claim)
        vhost = vhost_for(workdir)
        parts = urlsplit(self.url)
        user = unquote(parts.username or "guest")
        claim = ownership.claim(ownership.RABBITMQ_VHOST, vhost=vhost)
        try:
            self._rabbitmqctl("add_vhost", vhost)
            self._rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        except BaseException:  # refused, or Ctrl-C/SIGTERM before the run held it: it goes now
            with contextlib.suppress(HarnessError):
                self._rabbitmqctl("delete_vhost", vhost)
            ownership.release(claim)
            raise
        broker = urlunsplit(parts._replace(path="/" + quote(vhost, safe="")))
        results = workdir / ".killdrill" / "celery-results.sqlite"
        results.parent.mkdir(parents=True, exist_ok=True)
        return _Run(
            {"CELERY_BROKER_URL": broker, "CELERY_RESULT_BACKEND": f"db+sqlite:///{results}"},
            vhost=vhost,
            claim=claim,
        )

    def env(self, workdir: Path, thread: str) -> dict[str, str]:
        """The broker and backend of ``workdir``'s run (isolated on first use)."""
        workdir = Path(workdir)
        with self._lock:
            if not self._checked:
                self._check_reachable()
                self._checked = True
            run = self._runs.get(workdir)
            if run is None:
                run = self._runs[workdir] = self._isolate(workdir)
            return dict(run.env)

    def keys(self, workdir: Path) -> list[str]:
        """The Redis keys ``workdir``'s run holds now (none on RabbitMQ)."""
        if self.scheme not in _REDIS:
            return []
        return [
            k.decode() for k in self._client().scan_iter(match=keyprefix_for(Path(workdir)) + "*", count=500)
        ]

    def vhosts(self) -> list[str]:
        """This drill's virtual hosts RabbitMQ holds now (none on Redis)."""
        if self.scheme in _REDIS:
            return []
        names = self._rabbitmqctl("list_vhosts", "name").split()
        return [n for n in names if n.startswith("killdrill-")]

    def waits(
        self, workdir: Path, thread: str, timeline: Sequence[tuple[float, Attempt]]
    ) -> list[dict[str, Any]]:
        """How long Redis held a task a killed worker had taken: a resume reached the task's
        ``before:`` later after its start than attempt 1 did (the worker's own start being the
        same), and that excess is the visibility timeout running out (and its sweep).  RabbitMQ
        hands a dead connection's task on at once: nothing to say there."""
        if self.scheme not in _REDIS or len(timeline) < 2:
            return []
        if any(a.process is not None for _, a in timeline):
            return self._deployed_waits(timeline)
        first = {e.point: e.t_ms / 1000.0 for e in reversed(timeline[0][1].trace)}
        out: list[dict[str, Any]] = []
        for (_, killed), (began, resume) in itertools.pairwise(timeline):
            task = _held_task(killed)
            if task is None or f"before:{task}" not in first:
                continue
            again = next((e.t_ms / 1000.0 for e in resume.trace if e.point == f"before:{task}"), None)
            if again is None:
                continue
            waited = again - first[f"before:{task}"]
            if waited > 0:
                out.append(self._visibility_wait(task, began + again - waited, began + again))
        return out

    def _deployed_waits(self, timeline: Sequence[tuple[float, Attempt]]) -> list[dict[str, Any]]:
        """A deployment's: from a worker's kill while it held a task to the task's ``before:`` in
        whichever launch took it next (a replica that kept running, or the restarted one)."""
        out: list[dict[str, Any]] = []
        for began, killed in timeline:
            task = _held_task(killed)
            if task is None:
                continue
            end = began + killed.duration_ms / 1000.0
            taken = [
                at + e.t_ms / 1000.0
                for at, a in timeline
                if a is not killed
                for e in a.trace
                if e.point == f"before:{task}" and at + e.t_ms / 1000.0 > end
            ]
            if taken:
                out.append(self._visibility_wait(task, end, min(taken)))
        return out

    def _visibility_wait(self, task: str, start: float, end: float) -> dict[str, Any]:
        return {
            "label": f"Redis's visibility timeout ({self.visibility_s:g} s, --visibility-timeout, swept"
            f" every second) of Celery task {task}",
            "setting": "--visibility-timeout",
            "setting_s": self.visibility_s,
            "kept": "the broker's contract: Redis redelivers a task a dead worker took only once its"
            " visibility timeout expires (shorten it for a drill with --visibility-timeout)",
            "unit": f"task {task}",
            "from": start,
            "to": end,
        }

    def release(self, workdir: Path, thread: str) -> None:
        """Remove everything ``workdir``'s run left in the broker (its keys, or its vhost)."""
        with self._lock:
            run = self._runs.pop(Path(workdir), None)
        if run is None:
            return
        if run.keyprefix:
            client = self._client()
            batch: list[bytes] = []
            for key in client.scan_iter(match=run.keyprefix + "*", count=500):
                batch.append(key)
                if len(batch) >= 500:
                    client.delete(*batch)
                    batch.clear()
            if batch:
                client.delete(*batch)
        if run.vhost:
            self._rabbitmqctl("delete_vhost", run.vhost)
        ownership.release(run.claim)

    def explain_hang(self, workdir: Path, thread: str) -> tuple[str, dict[str, Any]] | None:
        """What the broker still holds for ``workdir``'s run when an attempt hung (Redis: the
        tasks waiting and the unacknowledged ones, and when Redis hands the latter on)."""
        if self.scheme not in _REDIS or Path(workdir) not in self._runs:
            return None
        client, prefix = self._client(), keyprefix_for(Path(workdir))
        unacked = int(client.hlen(prefix + "unacked") or 0)
        waiting = {}
        for key in client.scan_iter(match=prefix + "*", count=500):
            name = key.decode()[len(prefix) :]
            if not name.startswith(("unacked", "_kombu", "celery-task-meta")) and client.type(key) == b"list":
                waiting[name] = int(client.llen(key))
        if not unacked and not any(waiting.values()):
            return (
                f"the Celery broker ({_redacted(self.url)}) holds none of the run's tasks: none waiting, "
                "none unacknowledged",
                {"unacked": 0, "waiting": waiting, "visibility_timeout_s": self.visibility_s},
            )
        text = (
            f"the Celery broker ({_redacted(self.url)}) still holds {unacked} unacknowledged task(s) "
            f"and {sum(waiting.values())} waiting"
        )
        if unacked:
            text += (
                f"; Redis hands an unacknowledged task to another worker only after its visibility timeout "
                f"({self.visibility_s:g}s here), and only while a worker consumes the queue"
            )
        return text, {"unacked": unacked, "waiting": waiting, "visibility_timeout_s": self.visibility_s}

    def close(self) -> None:
        """Release every run still isolated (a drill that ended mid-case)."""
        with self._lock:
            left = list(self._runs)
        for workdir in left:
            with contextlib.suppress(HarnessError, OSError):
                self.release(workdir, "")
        if self._redis is not None:
            with contextlib.suppress(Exception):
                self._redis.close()
            self._redis = None


def _held_task(a: Attempt) -> str | None:
    """The task a killed attempt held unacknowledged: its last ``before:TASK`` with no
    ``committed:TASK`` after it (None when it was not killed, or held none)."""
    if a.killed_at is None:
        return None
    held: str | None = None
    for e in a.trace:
        kind, _, name = e.point.partition(":")
        if kind == "before":
            held = name
        elif kind == "committed" and name == held:
            held = None
    return held

"""The environment between the harness and the processes it launches, declared once.

Every ``KILLDRILL_*`` variable killdrill reads or writes is a constant here, with who sets it, who
reads it and its format; code names the constant, never the string
(``tests/unit/test_house_rules.py`` refuses a ``"KILLDRILL_`` literal anywhere else).  The one
exception keeps frameworks out of this file: an integration declares its own variables in its
folder, each named ``KILLDRILL_<INTEGRATION>_*`` (:func:`integration_prefix`: a runtime server's
address, a broker's key prefix, a checkpointer's forced timing).

Three kinds, told apart by who sets them:

- the drill's channel to an agent (set by the harness in every launch, read by the agent-side
  code: ``killdrill.agent``, the fakes, the integrations' bootstrap);
- marks between the harness's own processes (:data:`TEMPLATE`, :data:`DETECT`);
- the user's switches (:data:`DISABLE_PLUGINS`).  A harness setting is an option row, never a
  variable of the harness's own environment (``killdrill.options``, an integration's record).

Layer: root, beside ``errors``; imports nothing (the agent's bootstrap reads it at start).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = [
    "ANSWERS",
    "ATTEMPT",
    "CONTROL",
    "CONTROL_TOKEN",
    "DETECT",
    "DISABLE_PLUGINS",
    "EFFECT_DB",
    "EFFECT_SCHEMA",
    "FAKES_SECRET",
    "FAKES_URL",
    "INTEGRATIONS",
    "KILL_GATE",
    "LEDGER",
    "LISTEN_MARK",
    "PREFIX",
    "PROCESS",
    "PROXY_PREFIX",
    "REPLICA",
    "SMTP",
    "SMTPS",
    "SSL_CERT_FILE",
    "TEMPLATE",
    "THREAD",
    "WAIT_AT",
    "WORKDIR",
    "integration_prefix",
    "proxy_variable",
    "without_drill",
]

PREFIX = "KILLDRILL_"
"""Every variable here starts with it.  A launch inherits none of the harness's own (an outer
drill's channel must not leak into an inner one): :func:`without_drill`."""

# --- the drill's channel to an agent -------------------------------------------------------

CONTROL = "KILLDRILL_CONTROL"
"""Set by the supervisor (``process.supervisor``) in an attempt it watches; read by
``killdrill.agent``.  The address of the attempt's control socket (a path in the case's folder,
or ``/proc/PID/fd/N/NAME`` when that is too long).  Absent: not under a drill, every boundary a
no-op."""

CONTROL_TOKEN = "KILLDRILL_CONTROL_TOKEN"
"""Set by the supervisor beside :data:`CONTROL`; read by ``killdrill.agent`` (sent first on the
channel) and by ``process.reaping`` (finds the attempt's processes by it).  Random hex, never part
of a name another user can read."""

ATTEMPT = "KILLDRILL_ATTEMPT"
"""Set by the supervisor and the case runner (``drill.case``); read by the fakes (the attempt a
call is recorded under), the effects toolkit and the integrations.  The attempt's number, a
decimal from 1 (a clean run is 1 too)."""

WAIT_AT = "KILLDRILL_WAIT_AT"
"""Set by the supervisor and a deployment's services (``[]``); read by ``killdrill.agent``.  A
JSON list of the kill-point labels the agent waits at for the supervisor's answer; absent: every
point; ``[]``: none (every boundary sent one way)."""

KILL_GATE = "KILLDRILL_KILL_GATE"
"""Set by the supervisor (``1``) in an attempt killed at a point; read by ``killdrill.agent``: no
fake call lands while the supervisor decides at a boundary."""

THREAD = "KILLDRILL_THREAD"
"""Set by the drill (``drill.base``) in every launch of a run; read by the fakes, examples and
agents.  The run's thread id, the same in every attempt of a case."""

WORKDIR = "KILLDRILL_WORKDIR"
"""Set by the drill in every launch of a run; read by the integrations (views, answers) and
agents.  The run's folder, absolute; killdrill's files are in its ``.killdrill/``."""

LEDGER = "KILLDRILL_LEDGER"
"""Set by the drill in every launch of a run; read by the fakes (``killdrill.fakes.connect``).  The
ledger's path or SQLAlchemy URL."""

INTEGRATIONS = "KILLDRILL_INTEGRATIONS"
"""Set by the drill with ``--integration``; read by the bootstrap (``integrations._bootstrap``),
which activates each.  Comma-separated integration names."""

FAKES_URL = "KILLDRILL_FAKES_URL"
"""Set by the drill with ``--http-fakes`` (or a model script), one per launch; read by agents
(``{KILLDRILL_FAKES_URL}`` in ``--env``) and ``integrations._wire``.  ``http://127.0.0.1:PORT/SECRET``."""

FAKES_SECRET = "KILLDRILL_FAKES_SECRET"
"""Set by the drill beside :data:`FAKES_URL`: the secret path segment of that URL alone."""

SMTP = "KILLDRILL_SMTP"
"""Set by the drill with ``--smtp-fake``; read by agents and ``integrations._wire``.  ``host:port``
of the SMTP fake."""

SMTPS = "KILLDRILL_SMTPS"
"""Set by the drill with ``--smtp-fake`` beside :data:`SMTP`: ``host:port`` where the SMTP fake
speaks implicit TLS (``smtplib.SMTP_SSL``, a provider's port 465)."""

SSL_CERT_FILE = "SSL_CERT_FILE"
"""Set by the drill with ``--smtp-fake`` (unless ``--env`` sets it): OpenSSL's default trust file,
read by Python's ``ssl`` default contexts and httpx, here the machine's certificates and the SMTP
fake's own CA (constrained to the loopback), so an agent that verifies the fake's certificate
(``starttls(context=ssl.create_default_context())``) trusts it."""

EFFECT_DB = "KILLDRILL_EFFECT_DB"
"""Set by the drill with ``--effect-db`` (``drill.db_effects``); read by agents.  The run's
database URL (on PostgreSQL with ``options=-csearch_path=SCHEMA``)."""

EFFECT_SCHEMA = "KILLDRILL_EFFECT_SCHEMA"
"""Set beside :data:`EFFECT_DB` on PostgreSQL: the run's schema, ``kd_fx_<pid>_<hex>``."""

PROCESS = "KILLDRILL_PROCESS"
"""Set by a deployment (``drill.topology``) in each of its processes; read by ``integrations._work``.
The process's name (``worker``, ``driver``); absent: not a deployment (the driver)."""

REPLICA = "KILLDRILL_REPLICA"
"""Set beside :data:`PROCESS`: the replica's index, a decimal from 0."""

ANSWERS = "KILLDRILL_ANSWERS"
"""Set by the drill with ``--answer``; read by ``integrations._answers``.  A JSON list of the answers'
texts, in order."""

LISTEN_MARK = "KILLDRILL_LISTEN_MARK"
"""Set by a deployment (``drill.deployment``) in a service probed on a port (``tcp:``,
``http://``) where it can watch files; read by the bootstrap (``integrations._bootstrap``), which
then appends ``PID PORT`` to this file at each ``socket.listen()`` of the service's Python
processes, so the harness tries the probe the moment a port opens, not on its next timer.  A path
in the case's state folder; the file exists before the launch (the bootstrap never creates it)."""

# --- marks between the harness's own processes ----------------------------------------------

TEMPLATE = "KILLDRILL_TEMPLATE"
"""Set (``1``) by ``process.forks`` in its fork templates; read by ``fakes.locate``: an ancestor
showing it runs under a drill even where it shows no drill variables."""

DETECT = "KILLDRILL_DETECT"
"""Set by discovery (``drill.setup_checks``); read by the bootstrap.  ``MODULE=DIST|DIST,...``: the
top-level modules whose import the bootstrap records, each counted only when its file belongs to
one of the distributions named."""

# --- the user's switches ---------------------------------------------------------------------

DISABLE_PLUGINS = "KILLDRILL_DISABLE_PLUGINS"
"""Set by the user (as pytest's ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``); read by ``killdrill.registry``.
Not empty and not ``0``: no entry point of another distribution is loaded."""


PROXY_PREFIX = "KILLDRILL_PROXY_"
"""Set by the drill for each ``--proxy NAME`` (``KILLDRILL_PROXY_<NAME>``, upper case, other
characters as ``_``: :func:`proxy_variable`), read by the agent: the proxy's ``127.0.0.1:PORT``
for that launch (killdrill.faults.proxied)."""


def proxy_variable(name: str) -> str:
    """The variable that gives the agent proxy ``name``'s address: ``KILLDRILL_PROXY_NAME``."""
    return PROXY_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def integration_prefix(name: str) -> str:
    """The prefix of the integration ``name``'s own variables: ``KILLDRILL_<NAME>_``."""
    return f"{PREFIX}{name.upper()}_"


def without_drill(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without any ``KILLDRILL_*`` variable (what a launch inherits from the harness)."""
    return {k: v for k, v in environ.items() if not k.startswith(PREFIX)}

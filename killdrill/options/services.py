"""The deployment rows and their value forms: ``--serve [NAME=]CMD``, ``--ready NAME=PROBE``,
``--replicas NAME=N``, ``--after NAME=DEP[,DEP]`` (``killdrill.drill.topology`` gives them their
meaning)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from killdrill.options.kinds import Command, Number, Option, OptionError, Pairs, _join_pair
from killdrill.options.rules import Rule

__all__ = [
    "MAX_REPLICAS",
    "SERVICE_ROWS",
    "SERVICE_RULES",
    "join_after",
    "join_serve",
    "split_after",
    "split_ready",
    "split_replicas",
    "split_serve",
]

_SERVICE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_NAME_RULE = "a service name is ASCII letters, digits, _ and -, first a letter or _"

MAX_REPLICAS = 64
"""The most copies of one service: each is a process of every case (and of its clean runs)."""


def _service_name(argv: Sequence[str]) -> str:
    """An unnamed service's name: its script's or module's stem, else its program's."""
    if os.path.basename(argv[0]).startswith("python") and len(argv) > 1:
        module = argv[1] == "-m" and len(argv) > 2
        stem = argv[2].rsplit(".", 1)[-1] if module else os.path.splitext(os.path.basename(argv[1]))[0]
    else:
        stem = os.path.basename(argv[0])
    return re.sub(r"[^A-Za-z0-9_\-]", "_", stem) or "service"


def split_serve(text: str) -> tuple[str, list[str]]:
    """``NAME=CMD`` or ``CMD``: a first word holding ``=`` names the service (and must be a name:
    ``サービス=python app.py`` is a mistake, not a command named ``サービス=python``)."""
    name, sep, rest = text.partition("=")
    named = bool(sep) and _SERVICE_NAME.match(name.strip()) is not None and " " not in name.strip()
    if sep and not named and name.strip() and not any(c.isspace() for c in name.strip()):
        raise OptionError(f"{name.strip()!r} is not a service name ({_NAME_RULE}): expected [NAME=]CMD")
    argv = Command().from_text(rest if named else text)
    return (name.strip() if named else _service_name(argv)), argv


def join_serve(name: str, argv: Any) -> str:
    return f"{name}={argv if isinstance(argv, str) else shlex.join(argv)}"


def split_ready(text: str) -> tuple[str, str]:
    name, sep, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    probes = ("tcp:", "http://", "https://", "log:")
    if not sep or not _SERVICE_NAME.match(name) or not spec.startswith(probes):
        raise OptionError(f"{text!r}: expected NAME=tcp:PORT, NAME=http://URL or NAME=log:TEXT")
    return name, spec


def split_replicas(text: str) -> tuple[str, int]:
    name, sep, count = text.partition("=")
    count = count.strip()
    if not sep or not _SERVICE_NAME.match(name.strip()) or not count.isdigit() or int(count) < 1:
        raise OptionError(f"{text!r}: expected NAME=N with N >= 1")
    if len(count) > 4 or int(count) > MAX_REPLICAS:
        raise OptionError(
            f"{text!r}: at most {MAX_REPLICAS} copies of a service (each is a process of every case)"
        )
    return name.strip(), int(count)


def split_after(text: str) -> tuple[str, tuple[str, ...]]:
    """``worker=db,redis``: the services ``worker`` starts after (each ready by its probe)."""
    name, sep, deps = text.partition("=")
    names = tuple(d.strip() for d in deps.split(",")) if sep else ()
    if (
        not sep
        or not _SERVICE_NAME.match(name.strip())
        or not names
        or not all(map(_SERVICE_NAME.match, names))
    ):
        raise OptionError(f"{text!r}: expected NAME=DEP[,DEP] (service NAME starts once each DEP is ready)")
    return name.strip(), tuple(dict.fromkeys(names))


def join_after(name: str, deps: Any) -> str:
    return f"{name}={deps if isinstance(deps, str) else ','.join(deps)}"


SERVICE_ROWS: tuple[Option, ...] = (
    Option(
        "serve",
        Pairs(split_serve, join_serve, "[NAME=]CMD", once="service"),
        {},
        "a service run for the whole case beside the driver (the command after --)",
        "--serve",
        discovery=True,
    ),
    Option(
        "ready",
        Pairs(split_ready, _join_pair, "NAME=tcp:PORT|http://URL|log:TEXT", once="the probe of service"),
        {},
        "when a service is ready (default: its {port} accepts, or at once)",
        "--ready",
        discovery=True,
    ),
    Option(
        "replicas",
        Pairs(split_replicas, _join_pair, "NAME=N", once="the count of service"),
        {},
        "run N copies of a service ({replica} in its command)",
        "--replicas",
        discovery=True,
    ),
    Option(
        "after",
        Pairs(split_after, join_after, "NAME=DEP[,DEP]", once="the dependencies of service"),
        {},
        "start a service once the services it depends on passed their readiness probes"
        " (as docker-compose's depends_on: condition: service_healthy)",
        "--after",
        discovery=True,
    ),
    Option(
        "restart_delay",
        Number(float, 0.0, "a number of seconds >= 0"),
        0.0,
        "seconds before a killed service is started again (0)",
        "--restart-delay",
    ),
)
"""The drill table's deployment rows (``--serve``, ``--ready``, ``--replicas``, ``--after``,
``--restart-delay``)."""


def _with_serve(name: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda values: bool(values["serve"]) or not values[name]


SERVICE_RULES: tuple[Rule, ...] = tuple(
    Rule(
        f"{{{name}}} {what}: it needs {{serve}}; without a service it does nothing",
        _with_serve(name),
        ini_default=True,
    )
    for name, what in (
        ("replicas", "copies services"),
        ("ready", "says when a service is ready"),
        ("after", "orders the services' start"),
        ("restart_delay", "delays a killed service's restart"),
    )
)
"""Deployment options that mean nothing without ``--serve`` (an ini value is a session's default
for the tests that serve: not checked)."""

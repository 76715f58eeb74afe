"""The deployment rows and their value forms: ``--serve [NAME=]CMD``, ``--ready NAME=PROBE``,
``--replicas NAME=N`` (``killdrill.drill.topology`` gives them their meaning)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from typing import Any

from killdrill.options.kinds import Command, Number, Option, OptionError, Pairs, _join_pair

__all__ = ["SERVICE_ROWS", "join_serve", "split_ready", "split_replicas", "split_serve"]

_SERVICE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def _service_name(argv: Sequence[str]) -> str:
    """An unnamed service's name: its script's or module's stem, else its program's."""
    if os.path.basename(argv[0]).startswith("python") and len(argv) > 1:
        module = argv[1] == "-m" and len(argv) > 2
        stem = argv[2].rsplit(".", 1)[-1] if module else os.path.splitext(os.path.basename(argv[1]))[0]
    else:
        stem = os.path.basename(argv[0])
    return re.sub(r"[^A-Za-z0-9_\-]", "_", stem) or "service"


def split_serve(text: str) -> tuple[str, list[str]]:
    name, sep, rest = text.partition("=")
    named = bool(sep) and _SERVICE_NAME.match(name.strip()) is not None and " " not in name.strip()
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
    if not sep or not _SERVICE_NAME.match(name.strip()) or not count.strip().isdigit() or int(count) < 1:
        raise OptionError(f"{text!r}: expected NAME=N with N >= 1")
    return name.strip(), int(count)


SERVICE_ROWS: tuple[Option, ...] = (
    Option(
        "serve",
        Pairs(split_serve, join_serve, "[NAME=]CMD"),
        {},
        "a service run for the whole case beside the driver (the command after --)",
        "--serve",
        discovery=True,
    ),
    Option(
        "ready",
        Pairs(split_ready, _join_pair, "NAME=tcp:PORT|http://URL|log:TEXT"),
        {},
        "when a service is ready (default: its {port} accepts, or at once)",
        "--ready",
        discovery=True,
    ),
    Option(
        "replicas",
        Pairs(split_replicas, _join_pair, "NAME=N"),
        {},
        "run N copies of a service ({replica} in its command)",
        "--replicas",
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
"""The drill table's deployment rows (``--serve``, ``--ready``, ``--replicas``, ``--restart-delay``)."""

"""The fault proxies' row: ``--proxy NAME=SCHEME://HOST:PORT`` puts a harness-owned proxy
(``killdrill.faults.proxy``) between the agent and one of its dependencies, which the agent then
reaches at ``{proxy:NAME}`` (the proxy's port on 127.0.0.1) or ``$KILLDRILL_PROXY_NAME``
(``127.0.0.1:PORT``).  SCHEME says what the proxy reads: ``postgres`` (its ``COMMIT``),
``redis`` (its commands), ``tcp`` (bytes: AMQP, gRPC)."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from killdrill import envvars
from killdrill.envvars import proxy_variable
from killdrill.options.kinds import Option, OptionError, Pairs

__all__ = ["PROXY_ROWS", "SCHEMES", "proxy_variable", "split_proxy", "upstream_of"]

SCHEMES = {
    "postgres": "postgres",
    "postgresql": "postgres",
    "redis": "redis",
    "tcp": "tcp",
    "amqp": "tcp",
    "grpc": "tcp",
}
"""The schemes ``--proxy`` takes, and the protocol each is read as (AMQP and gRPC, a runtime
server's, are bytes to the proxy: only the whole-connection faults apply)."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_UPSTREAM = re.compile(
    r"^(?P<scheme>[a-z]+)://(?P<host>\[[^\]]+\]|[^:/\[\]]+):(?P<port>\d{1,5}|\{port:[^{}]+\})/?$"
)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def upstream_of(text: str) -> tuple[str, str, str]:
    """``SCHEME://HOST:PORT`` as (protocol, host, port text: digits, or ``{port:SERVICE}`` for a
    ``--serve`` service of a deployment)."""
    m = _UPSTREAM.match(text.strip())
    if m is None:
        raise OptionError(f"{text!r}: expected SCHEME://HOST:PORT, e.g. postgres://127.0.0.1:5432")
    scheme, host, port = m["scheme"], m["host"], m["port"]
    if scheme not in SCHEMES:
        raise OptionError(f"{text!r}: unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    if not _loopback(host):
        raise OptionError(
            f"{text!r}: {host} is not on this machine: a drill reaches nothing but the loopback"
            " (127.0.0.1, localhost, [::1])"
        )
    if port.isdigit() and not 0 < int(port) < 65536:
        raise OptionError(f"{text!r}: port {port} is not a TCP port")
    return SCHEMES[scheme], host.strip("[]"), port


def split_proxy(text: str) -> tuple[str, str]:
    name, sep, upstream = text.partition("=")
    name = name.strip()
    if not sep or not _NAME.match(name):
        raise OptionError(f"{text!r}: expected NAME=SCHEME://HOST:PORT (NAME: letters, digits, _ and -)")
    upstream_of(upstream)
    return name, upstream.strip()


def _join(name: str, value: Any) -> str:
    return f"{name}={value}"


PROXY_ROWS: tuple[Option, ...] = (
    Option(
        "proxy",
        Pairs(split_proxy, _join, "NAME=SCHEME://HOST:PORT", once="the proxy"),
        {},
        "a fault proxy between the agent and a dependency (postgres, redis, tcp), reached at"
        " {proxy:NAME} / $" + envvars.PROXY_PREFIX + "NAME: points during:NAME.commit, faults drop:/reset:",
        "--proxy",
        discovery=True,
    ),
)
"""The drill table's fault-proxy row."""

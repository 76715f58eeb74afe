"""A launch's fault proxies (``--proxy NAME=SCHEME://HOST:PORT``): started around the launches of
one supervisor, each launch given its own port of every proxy (``{proxy:NAME}`` filled in its
command and environment, ``$KILLDRILL_PROXY_NAME``), bound to its control channel (the proxy's
``during:NAME.OP`` points) and armed with its schedule item when that is a ``drop:NAME.OP`` or
``reset:NAME.OP`` (``killdrill.faults.proxy``)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from killdrill.envvars import proxy_variable
from killdrill.faults.proxy import Armed, FaultProxy
from killdrill.options.proxies import upstream_of
from killdrill.process.attempts import LaunchSpec, Running

__all__ = ["PLACEHOLDER", "Proxies"]

PLACEHOLDER = re.compile(r"\{proxy:([^{}]*)\}")
"""``{proxy:NAME}``: the port, on 127.0.0.1, of proxy NAME for the launch that reads it."""


class Proxies:
    """The proxies of one supervisor's launches (``upstreams``: name -> ``SCHEME://HOST:PORT`` with
    every ``{port:SERVICE}`` already filled)."""

    def __init__(self, upstreams: Mapping[str, str]) -> None:
        self.proxies: dict[str, FaultProxy] = {}
        try:
            for name, text in upstreams.items():
                scheme, host, port = upstream_of(text)
                self.proxies[name] = FaultProxy(name, scheme, (host, int(port)))
        except BaseException:
            self.close()
            raise

    def prepare(self, spec: LaunchSpec) -> None:
        """``spec``'s own port of every proxy: in its environment and its placeholders."""
        if not self.proxies:
            return
        ports = {name: proxy.listen(id(spec)) for name, proxy in self.proxies.items()}

        def fill(text: str) -> str:
            return PLACEHOLDER.sub(lambda m: str(ports.get(m.group(1).strip(), m.group(0))), text)

        spec.argv = tuple(fill(a) for a in spec.argv)
        env = {k: fill(v) for k, v in spec.env.items()}
        env.update({proxy_variable(name): f"127.0.0.1:{port}" for name, port in ports.items()})
        spec.env = env

    def bind(self, run: Running) -> None:
        """``run``'s announcements (``during:NAME.OP``) go to its control channel."""
        for proxy in self.proxies.values():
            proxy.bind(id(run.spec), run.listener.address, run.listener.token)

    def arm(self, run: Running) -> None:
        """Arm ``run``'s schedule item when it is a ``drop:``/``reset:`` of a proxy's op (the
        connection fault's nemesis asks every server of the scene, ``killdrill.faults.connection``)."""
        fault = run.spec.fault
        if fault is None or fault.fault is None or fault.point is None:
            return
        name, _, op = fault.point.split(":", 1)[1].rpartition(".")
        proxy = self.proxies.get(name)
        if proxy is None:
            return

        def applied(note: str) -> None:
            run.fired = True
            run.notes.append(note)

        hold_s = (fault.hold_ms or 0.0) / 1000.0
        proxy.arm(id(run.spec), Armed(fault.fault, op, fault.occurrence, hold_s, applied))

    def get(self, name: str) -> FaultProxy | None:
        return self.proxies.get(name)

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        self.proxies.clear()

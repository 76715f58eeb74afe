"""Readiness probes: the port a probe knocks on, and the ports a process tree listens on."""

from __future__ import annotations

import os
import socket

from killdrill.process.readiness import listening, probed_port


def test_the_probed_port_of_each_kind_of_probe() -> None:
    assert probed_port("tcp:8000") == 8000
    assert probed_port("http://127.0.0.1:8080/health") == 8080
    assert probed_port("http://localhost/") == 80
    assert probed_port("http://example.com:8080/") is None  # not a local port: nothing to compare
    assert probed_port("log:ready") is None


def test_the_ports_a_process_listens_on() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert s.getsockname()[1] in listening(os.getpid())
    assert listening(2**22 + 7) == set()  # no such process

"""Readiness probes: the port a probe knocks on, the ports a process tree listens on, and a probe
tried again and again (a ``log:`` probe reading only what its logs gained)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from killdrill.process.readiness import Appended, Probe, listening, probed_port


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


def test_a_log_probe_reads_only_what_was_appended_and_finds_a_line_split_between_writes(
    tmp_path: Path,
) -> None:
    out, err = tmp_path / "out", tmp_path / "err"
    out.write_bytes(b"starting\n")
    probe = Probe("log:server is up", str(out), str(err))  # stderr not written yet
    assert not probe()
    with err.open("ab") as f:
        f.write(b"booting... server is")
    assert not probe()
    assert probe.logs[0].offset == len(b"starting\n")  # read once, never again from its start
    with err.open("ab") as f:
        f.write(b" up\n")
    assert probe()  # the text split between two reads
    err.write_bytes(b"")
    assert probe()  # once passed, it stays passed


def test_a_log_probe_finds_a_line_in_a_log_replaced_since(tmp_path: Path) -> None:
    log = Appended(str(tmp_path / "err"))
    assert log.read() == b"" and not log.exists
    (tmp_path / "err").write_bytes("long first line é\n".encode())
    assert log.text() == "long first line é\n"
    (tmp_path / "err").write_bytes(b"new\n")  # truncated and rewritten: read from its start
    assert log.read() == b"new\n"


def test_a_tcp_probe_passes_once_the_port_accepts() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        probe = Probe(f"tcp:{s.getsockname()[1]}", "", "")
        assert not probe()
        s.listen()
        assert probe()
    with pytest.raises(ValueError, match="unknown readiness probe"):
        Probe("udp:53", "", "")

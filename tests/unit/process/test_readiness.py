"""Readiness probes: the port a probe knocks on, the ports a process tree listens on, and a probe
tried again and again (a ``log:`` probe reading only what its logs gained)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from killdrill.process.readiness import Appended, Probe, busy_listening, connected_to, listening, probed_port


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


def test_a_client_connected_to_a_port_and_a_tree_busy_or_idle() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert not connected_to(os.getpid(), {port})
        with socket.create_connection(("127.0.0.1", port)):
            assert connected_to(os.getpid(), {port})
            assert not connected_to(os.getpid(), {port + 1 if port < 65535 else port - 1})
        ports, cpu = busy_listening(os.getpid())
        assert port in ports and cpu > 0.0
    assert not connected_to(2**22 + 7, {port})


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


def test_an_http_probe_never_holds_its_caller_while_the_service_is_slow_to_answer(tmp_path: Path) -> None:
    """The supervisor's loop tries a probe at each write of a chatty service: a port that accepts
    but does not answer yet must cost each try next to nothing, and the answer, when it comes,
    must be read by a later try (the socket's fd is handed to the loop to watch)."""
    import threading
    import time

    watched: list[int] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = Probe(
            f"http://127.0.0.1:{port}/health",
            str(tmp_path / "out"),
            str(tmp_path / "err"),
            watch=watched.append,
            unwatch=watched.remove,
        )
        slowest = 0.0
        for _ in range(5):
            t = time.perf_counter()
            assert not probe()
            slowest = max(slowest, time.perf_counter() - t)
        assert slowest < 0.05, f"a try held its caller {slowest * 1000:.0f} ms"
        assert len(watched) == 1  # one request in flight, its socket watched
        conn, _ = server.accept()
        with conn:
            request = conn.recv(4096)
            assert request.startswith(b"GET /health HTTP/1.1\r\n")
            conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
            deadline = time.monotonic() + 5
            while not probe() and time.monotonic() < deadline:
                threading.Event().wait(0.005)
        assert probe.passed and watched == []  # answered: the socket closed, no longer watched


def test_an_http_probe_fails_an_answer_outside_200_399_and_tries_again(tmp_path: Path) -> None:
    import time

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = Probe(f"http://localhost:{port}/", str(tmp_path / "out"), str(tmp_path / "err"))
        for status in (b"503 Service Unavailable", b"302 Found"):
            assert not probe()
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.0 " + status + b"\r\n\r\n")
            deadline = time.monotonic() + 5
            while not probe() and time.monotonic() < deadline:
                time.sleep(0.005)
                if status.startswith(b"503") and probe.knock is None:
                    break  # answered 503: not ready, the knock done
        assert probe.passed  # the 302 counts, as a Kubernetes probe counts it


def test_an_http_probe_of_a_closed_port_fails_at_once(tmp_path: Path) -> None:
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    probe = Probe(f"http://127.0.0.1:{port}/", str(tmp_path / "out"), str(tmp_path / "err"))
    t = time.perf_counter()
    assert not probe() and not probe()
    assert time.perf_counter() - t < 0.05


def test_a_one_shot_http_readiness_reads_the_answer_and_closes_its_socket(tmp_path: Path) -> None:
    """``ready()`` (a caller with no loop) waits a moment for the answer of its one request."""
    import threading

    from killdrill.process.readiness import ready

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

        t = threading.Thread(target=answer)
        t.start()
        assert ready(f"http://127.0.0.1:{port}/", str(tmp_path / "o"), str(tmp_path / "e"))
        t.join()

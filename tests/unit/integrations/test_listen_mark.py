"""The bootstrap's listen mark (``KILLDRILL_LISTEN_MARK``): each ``listen()`` of the service's
Python processes, a forked child's too, appends ``PID PORT`` to the harness's file; the listen is
untouched, a missing file raises nothing and is not made, a second install wraps nothing twice,
and without the variable the bootstrap does not even import ``socket``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from killdrill import envvars
from killdrill.drill.env import bootstrap_dir

LISTENS = textwrap.dedent(
    """
    import os, socket, sys
    if sys.argv[1] == "again":  # a second install, as a reload would
        path = os.path.join(os.environ["BOOT"], "sitecustomize.py")
        exec(open(path).read(), {"__name__": "again", "__file__": path})
    def serve():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        with socket.create_connection(s.getsockname(), timeout=5):
            s.accept()[0].close()  # it listens as it always did
        return s.getsockname()[1]
    port = serve()
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(w, str(serve()).encode())
        os._exit(0)
    os.waitpid(child, 0)
    print(os.getpid(), port, child, os.read(r, 10).decode())
    """
)


def _run(tmp_path: Path, env: dict[str, str], *args: str) -> str:
    boot = bootstrap_dir()
    full = {**os.environ, "PYTHONPATH": boot, "BOOT": boot, **env}
    full = {k: v for k, v in full.items() if not (k.startswith(envvars.PREFIX) and k not in env)}
    out = subprocess.run(
        [sys.executable, "-c", LISTENS if args else "import sys; print('socket' in sys.modules)", *args],
        env=full, cwd=tmp_path, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert out.stderr == ""
    return out.stdout.strip()


def test_each_listen_of_the_service_and_its_children_is_marked(tmp_path: Path) -> None:
    mark = tmp_path / "attempt-2.listen"
    mark.touch()
    pid, port, child, child_port = _run(tmp_path, {envvars.LISTEN_MARK: str(mark)}, "again").split()
    assert mark.read_text().splitlines() == [f"{pid} {port}", f"{child} {child_port}"]  # once each


def test_a_missing_mark_file_is_not_made_and_the_listen_goes_on(tmp_path: Path) -> None:
    mark = tmp_path / "gone" / "attempt-2.listen"
    assert len(_run(tmp_path, {envvars.LISTEN_MARK: str(mark)}, "once").split()) == 4
    assert not mark.exists()


def test_without_the_variable_the_bootstrap_imports_no_socket(tmp_path: Path) -> None:
    assert _run(tmp_path, {}) == "False"

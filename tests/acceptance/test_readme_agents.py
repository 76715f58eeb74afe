"""The guide's "Drill your own agent" section (docs/getting-started.md, whose plain agent the
README's quickstart repeats), followed literally: its agents, its commands, its claims.

The agents are the guide's code blocks, written to a folder outside the clone; the commands are
the guide's lines, run by bash with this environment's ``killdrill`` first on PATH.  What the
guide says a mistake does (a key of None, a resume that checks ``snap.next`` alone, a forgotten
``--langgraph``) is checked on the same agents, changed by one literal substitution.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from killdrill import fakes

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
GUIDE = REPO / "docs" / "getting-started.md"
SECTION = "## Drill your own agent"


def section() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end != -1 else None]


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section(), flags=re.S)


def agent_source(filename: str) -> str:
    found = [b for b in blocks("python") if b.startswith(f"# {filename}")]
    assert len(found) == 1, f"one ```python block starting with '# {filename}' in the guide's section"
    return found[0]


def commands(script: str) -> list[str]:
    """The guide's killdrill lines that run ``script``, as written."""
    return [
        line.strip()
        for b in blocks("bash")
        for line in b.splitlines()
        if line.startswith("killdrill ") and f" {script} " in line
    ]


def bash(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def write(folder: Path, filename: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(source, encoding="utf-8")
    return folder


def test_plain_agent_commands_as_written(tmp_path: Path) -> None:
    folder = write(tmp_path, "agent.py", agent_source("agent.py"))
    lines = commands("agent.py")
    assert [ln.split()[1] for ln in lines] == ["points", "run", "drill"]
    points, run, drill = (bash(line, folder) for line in lines)
    assert points.returncode == 0 and "8 kill points reached by a clean run" in points.stdout, points.stderr
    assert "committed:charge" in points.stdout and "committed:send_receipt" in points.stdout
    assert run.returncode == 0 and run.stdout.startswith("EXACTLY-ONCE [during:mailbox.send]"), run.stdout
    assert drill.returncode == 0 and "8 cases: 8 exactly-once" in drill.stdout, drill.stdout + drill.stderr
    assert "warning" not in drill.stderr


def test_plain_agent_without_a_stable_key_duplicates_the_charge(tmp_path: Path) -> None:
    stable = 'key = f"{args.thread}:charge"'
    source = agent_source("agent.py")
    assert stable in source
    folder = write(tmp_path, "agent.py", source.replace(stable, "key = None"))
    drill = commands("agent.py")[-1]
    proc = bash(drill.replace("killdrill drill", "killdrill run --schedule during:payments.charge"), folder)
    assert proc.returncode == 1 and "VIOLATED [during:payments.charge]" in proc.stdout
    assert ": duplicate_effect" in proc.stdout.splitlines()[0]


def test_langgraph_agent_command_as_written(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite")
    folder = write(tmp_path, "graph_agent.py", agent_source("graph_agent.py"))
    (line,) = commands("graph_agent.py")
    proc = bash(line, folder)
    assert proc.returncode == 0 and "16 cases: 16 exactly-once" in proc.stdout, proc.stdout + proc.stderr
    assert "committed:checkpoint" in proc.stdout and "committed:charge" in proc.stdout
    assert "warning" not in proc.stderr, proc.stderr


def test_langgraph_resume_on_next_alone_misses_effects(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite")
    source = agent_source("graph_agent.py")
    assert "if snap.next or snap.tasks:" in source
    folder = write(tmp_path, "graph_agent.py", source.replace("if snap.next or snap.tasks:", "if snap.next:"))
    (line,) = commands("graph_agent.py")
    proc = bash(line, folder)
    # which checkpoint leaves only the __start__ task pending varies with LangGraph's background
    # writes (langgraph#8039); the drill as written must catch it at one of them at least
    assert proc.returncode == 1, proc.stdout
    cases = [ln.split() for ln in proc.stdout.split("Cases:")[1].splitlines()[2:18]]
    missing = [c[0] for c in cases if c[1] == "VIOLATED" and "missing_effect" in c[2]]
    assert any("checkpoint" in c for c in missing), proc.stdout
    assert {c[1] for c in cases} <= {"VIOLATED", "exactly-once"} and len(cases) == 16


def test_langgraph_agent_without_the_flag_is_warned(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite")
    folder = write(tmp_path, "graph_agent.py", agent_source("graph_agent.py"))
    (line,) = commands("graph_agent.py")
    proc = bash(line.replace("killdrill drill --langgraph", "killdrill points --discovery-runs 1"), folder)
    assert proc.returncode == 0, proc.stderr
    assert (
        "killdrill: warning: the agent imports langgraph but the langgraph integration is off" in proc.stderr
    )


def _signature(fn: object) -> str:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    params = [p.replace(annotation=inspect.Parameter.empty) for p in list(sig.parameters.values())[1:]]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


def test_the_fakes_table_lists_every_operation_with_its_signature() -> None:
    rows = re.findall(r"^\| `([^`]+)` \|", section(), flags=re.M)
    handle = fakes.connect()
    expected = []
    for name in fakes.PROVIDERS:
        cls = type(handle.provider(name))
        own = {}  # its operations, its mixins' too (payments' transfers and payouts), not Provider's
        for klass in reversed(cls.__mro__[: cls.__mro__.index(fakes.Provider)]):
            own.update(vars(klass))
        for method, fn in own.items():
            if not method.startswith("_") and callable(fn):
                expected.append(f"{name}.{method}{_signature(fn)}")
    for method in ("configure", "calls", "fence"):
        expected.append(f"PROVIDER.{method}{_signature(getattr(fakes.Provider, method))}")
    assert sorted(rows) == sorted(expected)


def test_install_lines_work_from_a_clone() -> None:
    """``pip install "killdrill[...]"`` needs a package index that has killdrill; a clone installs itself."""
    for page in (README, *sorted((REPO / "docs").rglob("*.md"))):
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("pip install"):
                assert re.match(r'pip install -e (\.|"\.\[[a-z,-]+\]")( |$)', line), f"{page}: {line}"


def test_the_readmes_quickstart_is_the_guides_agent() -> None:
    """The README repeats the guide's plain agent and its commands: they cannot drift apart."""
    readme = README.read_text(encoding="utf-8")
    assert agent_source("agent.py") in readme
    for line in commands("agent.py"):
        assert line in readme, line

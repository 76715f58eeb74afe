"""Every code block a user copies from the docs is checked against the code, so no page drifts.

- every ```python block of README.md and docs/ compiles;
- every ``killdrill ...`` line of a ```bash block (continuations joined) parses with the CLI's own
  parser: a renamed or removed option fails here, not in a user's terminal;
- a framework page's "A planted mistake" block is run as written and its output compared with the
  page's (the verdict's first line, the root-cause lines, the exit code). Two frameworks run here
  (LangGraph, LlamaIndex: about a second a case on a quiet machine); the others are ``slow``.

The guide's agents (docs/getting-started.md) run in full in ``test_readme_agents.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from killdrill.cli.commands import build_parser
from tests.frameworks import need

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^( *)```(\w+)[^\n]*\n(.*?)^\1```", re.S | re.M)


def fenced(page: Path, lang: str) -> list[str]:
    """The page's blocks in ``lang``, indentation (an admonition's) removed."""
    text = page.read_text(encoding="utf-8")
    out = []
    for indent, kind, body in FENCE.findall(text):
        if kind == lang:
            out.append("\n".join(line.removeprefix(indent) for line in body.splitlines()) + "\n")
    return out


def _pages_with(lang: str) -> list[tuple[str, int, str]]:
    return [(str(p.relative_to(REPO)), i, b) for p in PAGES for i, b in enumerate(fenced(p, lang))]


@pytest.mark.parametrize(("page", "index", "source"), _pages_with("python"), ids=lambda v: str(v)[:40])
def test_every_python_block_compiles(page: str, index: int, source: str) -> None:
    if source.lstrip().startswith("--8<--"):
        return  # an included module: it is imported and drilled by its own tests
    compile(source, f"{page} block {index + 1}", "exec")


def killdrill_lines(source: str) -> list[str]:
    """The ``killdrill ...`` lines of a shell block, continuations joined, comments dropped."""
    lines = []
    for line in source.replace("\\\n", " ").splitlines():
        line = line.strip()
        if "&& killdrill " in line:
            line = line[line.index("killdrill ") :]
        if line.startswith("killdrill "):
            lines.append(re.sub(r"\s+#.*$", "", line))
    return lines


COMMANDS = [(page, line) for page, _, block in _pages_with("bash") for line in killdrill_lines(block)]


def test_the_docs_have_commands_to_check() -> None:
    assert len(COMMANDS) > 30 and {p for p, _ in COMMANDS} >= {"README.md", "docs/frameworks/dbos.md"}


@pytest.mark.parametrize(("page", "line"), COMMANDS, ids=lambda v: str(v)[:60])
def test_every_killdrill_line_parses(page: str, line: str) -> None:
    words = shlex.split(line)[1:]
    own = words[: words.index("--")] if "--" in words else words
    try:
        build_parser().parse_args(own)
    except SystemExit as exc:
        pytest.fail(f"{page}: `{line}` does not parse (exit {exc.code})", pytrace=False)


FRAMEWORK_NEEDS = {
    "langgraph": ("langgraph", "langgraph"),
    "llama-index": ("llama-index", "workflows"),
    "dbos": ("dbos", "dbos"),
    "temporal": ("temporal", "temporalio"),
    "openai-agents": ("openai-agents", "agents"),
    "crewai": ("crewai", "crewai"),
    "pydantic-ai": ("pydantic-ai", "pydantic_ai"),
    "deployments": ("celery", "celery", "redis", "fastapi", "uvicorn", "dbos"),  # Celery, the web app
}
FAST = {"langgraph", "llama-index"}


def planted(page: Path) -> list[tuple[str, str]]:
    """Each "A planted mistake" section's command and the output the page shows for it."""
    text = page.read_text(encoding="utf-8")
    found = []
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        if part.startswith("A planted mistake"):
            found.append((killdrill_lines(fenced_in(part, "bash"))[0], fenced_in(part, "text")))
    return found


def fenced_in(text: str, lang: str) -> str:
    m = re.search(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)
    assert m, f"no ```{lang} block"
    return m.group(1)


def _planted_cases() -> list[object]:
    cases = []
    for page in [*sorted((REPO / "docs" / "frameworks").glob("*.md")), REPO / "docs" / "deployments.md"]:
        for i, (command, shown) in enumerate(planted(page)):
            marks = [] if page.stem in FAST else [pytest.mark.slow]
            cases.append(pytest.param(page.stem, command, shown, marks=marks, id=f"{page.stem}-{i + 1}"))
    return cases


def _root_causes(text: str) -> list[str]:
    lines = text.splitlines()
    if not any(re.match(r"\d+ root causes?, and the fix for each:", ln) for ln in lines):
        return []
    start = next(i for i, ln in enumerate(lines) if re.match(r"\d+ root causes?, and the fix", ln))
    return [ln.split(" in ")[0] for ln in lines[start:] if re.match(r"  \w+: ", ln)]


@pytest.mark.parametrize(("framework", "command", "shown"), _planted_cases())
def test_a_framework_pages_planted_mistake_says_what_the_page_shows(
    framework: str, command: str, shown: str, tmp_path: Path
) -> None:
    need(*FRAMEWORK_NEEDS[framework])
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    out = proc.stdout
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert out.splitlines()[0] == shown.splitlines()[0], out
    assert _root_causes(out) == _root_causes(shown), out

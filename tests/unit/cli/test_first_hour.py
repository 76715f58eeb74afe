"""The first hour on a framework, as a newcomer with a fresh clone met it: extras, names, hints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from killdrill.cli.commands import main
from killdrill.errors import install_hint
from killdrill.registry import nearest

REPO = Path(__file__).resolve().parents[3]


def _normalized(name: str) -> str:
    """PEP 685: the form every pip compares extras in (pip 23.2 refuses any other spelling)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _extras() -> set[str]:
    with open(REPO / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["project"]["optional-dependencies"])


def test_every_extra_is_spelled_as_pip_normalizes_it() -> None:
    assert {e for e in _extras() if e != _normalized(e)} == set()


def _user_facing_files() -> list[Path]:
    found = [REPO / "README.md", REPO / ".ci" / "run", REPO / "mkdocs.yml"]
    for folder in ("docs", "killdrill", "fakes", "pytest_plugin", "tests", "nightly"):
        found += [
            p for p in (REPO / folder).rglob("*") if p.suffix in {".py", ".md", ".yml", ".yaml", ".toml"}
        ]
    return [p for p in found if p.is_file() and p.name != Path(__file__).name]


def test_every_install_hint_names_an_extra_that_exists_as_written() -> None:
    """``.[a,b]`` and ``killdrill[a]`` in the README, docs, CI and the code's messages."""
    extras, bad = _extras(), []
    for path in _user_facing_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r'(?:killdrill|"\.)\[([A-Za-z0-9_,.-]+)\]', text):
            bad += [
                f"{path.relative_to(REPO)}: {name}"
                for name in m.group(1).split(",")
                if name not in extras | {"...", "EXTRA"}
            ]
    assert bad == []


def test_required_frameworks_in_ci_are_extras() -> None:
    run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    named = re.search(r"KILLDRILL_REQUIRE_FRAMEWORKS=([\w,-]+)", run)
    assert named and set(named.group(1).split(",")) <= _extras()


@pytest.mark.parametrize("extra", ["llama_index", "openai_agents", "pydantic_ai", "Llama.Index"])
def test_the_install_hint_is_one_a_clone_can_follow(extra: str) -> None:
    hint = install_hint(extra)
    assert hint.startswith('pip install -e ".[') and "_" not in hint.split("]")[0] and "." in hint
    assert hint.split("[")[1].split("]")[0] in _extras()


@pytest.mark.parametrize(
    ("word", "meant"),
    [
        ("DBOS", "dbos"),
        ("openai-agents", "openai_agents"),
        ("LangGraph", "langgraph"),
        ("langraph", "langgraph"),
    ],
)
def test_a_framework_name_is_suggested_whatever_its_case_or_dash(word: str, meant: str) -> None:
    names = ["crewai", "dbos", "langgraph", "llama_index", "openai_agents", "temporal"]
    assert nearest(word, names) == meant


@pytest.mark.parametrize(
    "argv",
    [["drill", "--integration", "DBSO", "--", "python", "-c", "pass"], ["conform", "--integration", "DBSO"]],
)
def test_a_misspelt_integration_gets_a_suggestion_in_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Capitals and dashes name an integration as they are (``DBOS``, ``openai-agents``: the
    records' spelling rule); a misspelling is one line with the nearest name."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "did you mean dbos?" in err and err.count("\n") == 1, err


def test_drill_help_names_every_route_the_model_fake_serves(capsys: pytest.CaptureFixture[str]) -> None:
    """The Agents SDK speaks the Responses API: a newcomer reads in ``--help`` that it is served, and
    that ``--model-script`` alone starts the fakes (``Drill.launch`` serves them for a model)."""
    from killdrill.fakes import model, model_responses

    with pytest.raises(SystemExit):
        main(["drill", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for route in (*model.ROUTES, *model_responses.ROUTES):
        assert route in text, route
    assert "no --http-fakes needed" in text


def test_two_processes_under_one_attempt_are_named_as_such() -> None:
    """Concurrent resumers share an attempt number: the evidence says two processes, not a repeat."""
    from killdrill.records import Call
    from killdrill.verdict.phrases import calls_phrase

    def call(seq: int, attempt: int, pid: int) -> Call:
        return Call(seq, "mailbox", "send", None, {}, "created", None, attempt, pid, 0.0)

    text = calls_phrase([call(1, 2, 101), call(2, 2, 102)], {})
    assert text.startswith(
        "attempt 2 process 101 key (no key) created, attempt 2 process 102 key (no key) created"
    )
    assert "2 processes ran at once as attempt 2" in text
    assert calls_phrase([call(1, 1, 101), call(2, 2, 102)], {}) == (
        "attempt 1 key (no key) created, attempt 2 key (no key) created"
    )


@pytest.mark.parametrize(
    ("argv", "header"),
    [
        (["--integration", "dbos", "--property", "consume_once"], "1 framework x 1 property"),
        (["--integration", "dbos", "--integration", "langgraph"], "2 frameworks x 6 properties"),
    ],
)
def test_conform_counts_in_words(
    argv: list[str], header: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import killdrill.conform.properties as properties

    monkeypatch.setattr(properties, "conform", lambda *a, **k: [])
    assert main(["conform", *argv]) == 0
    assert f"killdrill conform: {header}\n" in capsys.readouterr().err


def test_a_root_cause_over_two_cases_quotes_each_cases_own_circumstances() -> None:
    from killdrill.records import CaseResult, Violation
    from killdrill.report.drill import causes_lines

    def case(point: str) -> CaseResult:
        v = Violation(
            "duplicate_effect",
            "m",
            "payments",
            "charge",
            cause="no_key",
            observed=f"no idempotency key; killed at {point}",
            fix="send a key",
        )
        return CaseResult(("a",), point, "t", "w", violations=(v,))

    lines = causes_lines([case("during:payments.charge"), case("after:payments.charge")])
    assert (
        "    observed in during:payments.charge: no idempotency key; killed at during:payments.charge"
        in lines
    )
    assert (
        "    observed in after:payments.charge: no idempotency key; killed at after:payments.charge" in lines
    )
    same = causes_lines([case("during:x"), case("during:x")])
    assert "    observed: no idempotency key; killed at during:x" in same

"""The conform table's renderings and the merge of a table made in another venv (CrewAI's)."""

from __future__ import annotations

import json
from pathlib import Path

import killdrill
from killdrill.conform.frameworks import by_name
from killdrill.conform.properties import Cell
from killdrill.conform.table import load_cells, merge, render_markdown, render_text, to_json


def _cells() -> list[Cell]:
    return [
        Cell("prefix_continuation", "langgraph", "1.2.24", "holds", "went on at before:notify"),
        Cell(
            "consume_once",
            "langgraph",
            "1.2.24",
            "violated",
            "mailbox.send landed 2 times",
            "killdrill run X",
        ),
        Cell("prefix_continuation", "crewai", None, "not installed", 'pip install "killdrill[crewai]"'),
        Cell("consume_once", "crewai", None, "not installed", 'pip install "killdrill[crewai]"'),
    ]


def test_renderings_name_every_cell() -> None:
    text = render_text(_cells())
    assert text.splitlines()[0].split() == ["property", "LangGraph", "1.2.24", "CrewAI", "Flows"]
    assert "reproduce: killdrill run X" in text
    assert 'every property / CrewAI Flows: not installed: pip install "killdrill[crewai]"' in text
    md = render_markdown(_cells())
    assert md.splitlines()[0] == "| property | LangGraph 1.2.24 | CrewAI Flows |"
    assert "| consume_once | **violated** | **not installed** |" in md
    data = to_json(_cells())
    assert data["properties"] == ["prefix_continuation", "consume_once"]
    assert data["frameworks"]["langgraph"]["version"] == "1.2.24"


def test_merge_fills_what_was_not_installed(tmp_path: Path) -> None:
    theirs = [
        Cell("prefix_continuation", "crewai", "1.15.30", "violated", "charge ran again", "killdrill run Y")
    ]
    path = tmp_path / "crewai.json"
    path.write_text(json.dumps(to_json(theirs)))
    merged = {(c.framework, c.property): c for c in merge(_cells(), load_cells(str(path)))}
    assert merged[("crewai", "prefix_continuation")].status == "violated"
    assert merged[("crewai", "consume_once")].status == "not installed"
    assert merged[("langgraph", "consume_once")].status == "violated"


def test_frameworks_by_name() -> None:
    assert [f.name for f in by_name(["crewai", "langgraph"])] == ["langgraph", "crewai"]
    assert by_name(None)[0].command()[:3] == ["python", "-m", "killdrill.conform.probes.langgraph_probe"]


def test_a_bundled_probes_path_is_written_portably() -> None:
    probe = Path(killdrill.__file__).resolve().parent / "conform" / "probes" / "openai_agents_probe.yaml"
    cell = Cell(
        "consume_once",
        "openai_agents",
        "0.24.0",
        "violated",
        "duplicate_effect: mailbox.send landed 2 times",
        f"killdrill run --model-script {probe} -- python -m killdrill.conform.probes.openai_agents_probe",
    )
    text = render_markdown([cell])
    assert "--model-script <site-packages>/killdrill/conform/probes/openai_agents_probe.yaml" in text
    assert str(probe.parents[2]) not in text


def test_a_plugins_install_hint_names_its_own_distribution() -> None:
    from killdrill.conform.frameworks import Framework

    own = Framework("temporal", "Temporal", "temporalio", "temporalio", "temporal", committed="c")
    assert own.install_hint() == 'pip install -e ".[temporal]" (in killdrill\'s clone)'
    plugin = Framework("acme", "Acme", "acme-flows", "acme", "Acme_Flows", committed="c", plugin="kd-acme")
    assert plugin.install_hint() == 'pip install "kd-acme[acme-flows]"'
    bare = Framework("acme", "Acme", "acme-flows", "acme", "", committed="c", plugin="kd-acme")
    assert bare.install_hint() == "pip install acme-flows"

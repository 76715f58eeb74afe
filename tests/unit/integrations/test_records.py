"""The integrations' records: names and aliases resolve, the CLI's shortcut flags and the
conform table come from the records, a record's cause replaces the generic one."""

from __future__ import annotations

import pytest

from killdrill import integrations
from killdrill.cli.commands import build_parser, drill_options
from killdrill.conform.frameworks import by_name, frameworks, quick
from killdrill.errors import UsageError


def test_a_name_resolves_in_any_case_and_with_dashes() -> None:
    assert integrations.find("DBOS").name == "dbos"
    assert integrations.find("openai-agents").name == "openai_agents"
    assert integrations.find("LlamaIndex").name == "llama_index"  # an alias
    assert integrations.canonical_names(["DBOS", "dbos", "Temporal"]) == ("dbos", "temporal")


def test_an_unknown_integration_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(UsageError) as info:
        integrations.canonical_names(["langchain"])
    message = str(info.value)
    assert "\n" not in message and "unknown integration 'langchain'" in message and "langgraph" in message


def test_every_built_in_record_declares_its_framework() -> None:
    for name, record in integrations.known().items():
        assert record.title and record.distributions and record.modules and record.hint, name
        assert record.examples, name
    probed = {n for n, r in integrations.known().items() if r.probe is not None}
    assert probed == {f.name for f in frameworks()} >= {"langgraph", "dbos", "temporal"}


def test_the_cli_shortcut_comes_from_the_record() -> None:
    args = build_parser().parse_args(["run", "-s", "before:a", "--langgraph", "--integration", "DBOS"])
    assert drill_options(args).integrations == ("dbos", "langgraph")


def test_the_conform_table_is_read_from_the_records() -> None:
    assert [f.name for f in frameworks()][:2] == ["langgraph", "llama_index"]  # the probes' order
    assert set(quick()) == {"langgraph", "llama_index"}
    (oa,) = by_name(["openai_agents"])
    assert oa.probe == "killdrill.conform.probes.openai_agents_probe"
    assert (oa.model_script() or "").endswith("openai_agents_probe.yaml")

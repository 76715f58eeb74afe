"""killdrill.options: one check per options value, messages in the caller's spelling, the chaos and
plugin rows (in-process: no agent runs)."""

from __future__ import annotations

import shutil

import pytest

from killdrill.chaos import ChaosOptions
from killdrill.chaos.options import CHAOS_OPTIONS
from killdrill.drill import Drill, DrillOptions
from killdrill.options import (
    OPTIONS,
    OptionError,
    Spelling,
    by_field,
    override,
)
from killdrill.options.reproduce import reproduce_line
from killdrill.pytest_plugin._flags import PLUGIN_OPTIONS

TRUE = [shutil.which("true") or "/bin/true"]  # not a python command


@pytest.mark.parametrize(
    ("spelled", "message"),
    [
        (Spelling.FLAG, "--model-variance needs --model-script (the model fake's script)"),
        (Spelling.INI, "killdrill_model_variance needs killdrill_model_script (the model fake's script)"),
        (Spelling.KEYWORD, "model_variance= needs model_script= (the model fake's script)"),
    ],
)
def test_a_rule_names_both_options_as_the_caller_spelled_them(spelled: Spelling, message: str) -> None:
    with pytest.raises(OptionError) as err:
        DrillOptions(model_variance=3, spelled=spelled)
    assert str(err.value) == message


def test_an_option_the_caller_did_not_give_is_named_in_the_spelling_of_the_one_it_did() -> None:
    # the plugin's layers: model_variance from the ini file, nothing else
    with pytest.raises(OptionError, match=r"^killdrill_model_variance needs killdrill_model_script "):
        DrillOptions(model_variance=3, spelled={"model_variance": Spelling.INI})
    # a marker's keyword beside an ini key: each named where it was set
    with pytest.raises(
        OptionError, match=r"^env= names \{KILLDRILL_SMTP\}, .* only with killdrill_smtp_fake$"
    ):
        DrillOptions(
            env={"S": "{KILLDRILL_SMTP}"}, spelled={"env": Spelling.KEYWORD, "smtp_fake": Spelling.INI}
        )


@pytest.mark.parametrize(
    ("spelled", "fork", "check"),
    [
        (Spelling.FLAG, "--launcher fork needs a `python", "unknown check 'nope' in --check: expected"),
        (Spelling.INI, "killdrill_launcher = fork needs", "unknown check 'nope' in killdrill_checks:"),
        (Spelling.KEYWORD, "launcher='fork' needs a `python", "unknown check 'nope' in checks=:"),
    ],
)
def test_the_drills_rules_are_worded_the_same_way(spelled: Spelling, fork: str, check: str) -> None:
    """The rules that need the command are the drill's, one-line OptionErrors (were HarnessErrors)."""
    with pytest.raises(OptionError) as err:
        Drill(TRUE, DrillOptions(launcher="fork", spelled=spelled))
    assert str(err.value).startswith(fork) and "\n" not in str(err.value)
    with pytest.raises(OptionError) as err:
        Drill(TRUE, DrillOptions(checks=["nope"], spelled=spelled))
    assert str(err.value).startswith(check)


def test_drill_keywords_over_flag_options_are_named_as_keywords() -> None:
    flags = DrillOptions(timeout=2, spelled=Spelling.FLAG)
    with pytest.raises(OptionError, match=r"^launcher='fork' needs"):
        Drill(TRUE, flags, launcher="fork")
    with pytest.raises(OptionError, match=r"^max_attempts=: expected a whole number >= 1, got 0$"):
        override(flags, {"max_attempts": 0})
    assert override(flags, {"max_attempts": 2}).timeout == 2


def test_text_and_python_values_land_on_one_value() -> None:
    a = DrillOptions(
        identity={"payments.charge": ["account"]}, signal="TERM", between=["python", "x.py"], timeout=2
    )
    b = DrillOptions(
        identity=["payments.charge=account"], signal="term", between="python x.py", timeout="2",
        spelled=Spelling.FLAG,
    )  # fmt: skip
    assert a == b


def test_chaos_options_are_checked_by_their_rows() -> None:
    assert [r.flag for r in CHAOS_OPTIONS if r.flag] == [
        "--runs", "--budget", "--faults", "--seed", "--kills", "--shard", "--processes", "--report",
        "--regressions", "--no-shrink", "--shrink-runs", "--max-failures",
    ]  # fmt: skip
    text = ChaosOptions(seed="7", budget_s="20m", shard="2/4", faults="pause", spelled=Spelling.FLAG)
    assert (text.seed, text.budget_s, text.shard, text.faults) == (7, 1200.0, (2, 4), ("kill", "pause"))
    assert text == ChaosOptions(seed=7, budget_s=1200, shard=(2, 4), faults=("pause",))
    for kwargs, message in [
        ({"runs": 0}, "runs=: expected a whole number >= 1, got 0"),
        ({"shard": (3, 2)}, "shard=: need 1 <= K <= N, got (3, 2)"),
        (
            {"faults": ("zombie",)},
            "faults=: unknown fault 'zombie'; expected some of kill, pause, upgrade, net, power, deps",
        ),
        ({"min_kills": 3, "max_kills": 2}, "min_kills= is more than max_kills="),
    ]:
        with pytest.raises(OptionError) as err:
            ChaosOptions(seed=1, **kwargs)  # type: ignore[arg-type]
        assert str(err.value) == message
    with pytest.raises(OptionError, match=r"^--shard: need 1 <= K <= N, got '3/2'$"):
        ChaosOptions(seed=1, shard="3/2", spelled=Spelling.FLAG)  # type: ignore[arg-type]


def test_the_plugins_flags_are_rows_with_derived_flags() -> None:
    assert [r.flag for r in PLUGIN_OPTIONS] == [
        "--killdrill-point", "--killdrill-random", "--killdrill-seed", "--killdrill-regressions",
        "--killdrill-workers", "--killdrill-keep", "--killdrill-json", "--killdrill-rediscover",
    ]  # fmt: skip
    assert not any(r.ini_key for r in (*PLUGIN_OPTIONS, *CHAOS_OPTIONS))
    assert all(r.ini == f"killdrill_{r.field}" for r in OPTIONS)


def test_reproduce_line_is_a_function_of_the_command_and_options() -> None:
    options = DrillOptions(timeout=2.5, http_fakes=True, root="/tmp/x", between="python r.py")
    assert reproduce_line(["python", "agent.py"], options, "before:x") == (
        "killdrill run --schedule before:x --timeout 2.5 --http-fakes --between 'python r.py'"
        " -- python agent.py"
    )
    assert by_field("root").reproduce is False

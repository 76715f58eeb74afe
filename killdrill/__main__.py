"""``python -m killdrill`` is the ``killdrill`` command."""

import sys

from killdrill.cli import main

sys.exit(main())

"""``python -m killdrill`` is the ``killdrill`` command."""

import sys

from killdrill.cli.main import main

sys.exit(main())

"""``python -m killdrill.audit URL [--json FILE]``."""

import sys

from killdrill.audit import main

sys.exit(main())

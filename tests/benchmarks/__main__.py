"""``python -m tests.benchmarks``: run every benchmark once, print and save the figures."""

import sys

from tests.benchmarks.bench import main

sys.exit(main())

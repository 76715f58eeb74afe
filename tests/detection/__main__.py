"""``python -m tests.detection``: print the detection table."""

import sys

from tests.detection.run import main

sys.exit(main())

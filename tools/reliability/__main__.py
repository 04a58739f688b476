"""``python -m tools.reliability [--quick] [--json PATH]``: see ``tools.reliability.runner``."""

import sys

from .runner import main

sys.exit(main())

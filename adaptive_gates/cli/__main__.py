"""``python -m adaptive_gates.cli``: the ``adaptive-gates`` command."""

import sys

from .command import main

sys.exit(main())

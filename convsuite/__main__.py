"""``python -m convsuite``: the same as the ``convsuite`` command."""

import sys

from convsuite.cli import main

sys.exit(main())

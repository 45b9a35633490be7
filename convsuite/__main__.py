"""``python -m convsuite``: the same as the ``convsuite`` command."""

import sys

try:
    from convsuite.cli import main
except KeyboardInterrupt:  # Ctrl-C while the imports run: the same one line as later
    print("convsuite: interrupted", file=sys.stderr)
    sys.exit(130)  # 128 + SIGINT, as convsuite.cli.EXIT_INTERRUPTED

sys.exit(main())

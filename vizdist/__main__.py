"""``python -m vizdist``: the same command line as the ``vizdist`` console script."""

from __future__ import annotations

import sys

from vizdist.cli import main

if __name__ == "__main__":
    sys.exit(main())

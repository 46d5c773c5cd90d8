"""``python -m ortops``: the ``ortops`` command (see :mod:`ortops._cli`)."""

from __future__ import annotations

import sys

from ortops._cli import main

if __name__ == "__main__":
    sys.exit(main())

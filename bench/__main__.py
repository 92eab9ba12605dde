"""``python -m bench [--quick]``: see :mod:`bench.run`."""

from __future__ import annotations

import sys

from .run import main

sys.exit(main())

"""`python -m gpuci`."""

from __future__ import annotations

import sys

from gpuci.cli import main

sys.exit(main())

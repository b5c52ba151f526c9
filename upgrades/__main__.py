"""``python -m upgrades``: one upgrade check, or a matrix of them (``upgrades.check.main``)."""

import sys

from upgrades.check import main

sys.exit(main())

"""``python -m bench [NAME ...] [--config FILE|PRESET]``: what ``tessera bench`` runs."""

import sys

from bench.run import main

sys.exit(main())

"""``python -m roseood.cli``: the ``rose`` command."""

import sys

from roseood.cli import main

sys.exit(main())

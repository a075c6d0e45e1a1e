"""``python -m roseood`` (and ``torchrun --nproc-per-node N -m roseood ...``): the ``rose`` command."""

import sys

from roseood.cli import main

sys.exit(main())

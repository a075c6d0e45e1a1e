"""``python -m roseood`` (and ``torchrun --nproc-per-node N -m roseood ...``): the ``rose`` command."""

from roseood.cli import run

run()

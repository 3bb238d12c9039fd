"""``python -m reference_models.holmes``: see :mod:`reference_models.holmes.cli`."""

from reference_models.engine import exit_process
from reference_models.holmes.cli import main

exit_process(main())

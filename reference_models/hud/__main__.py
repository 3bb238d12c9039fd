"""``python -m reference_models.hud``: see :mod:`reference_models.hud.cli`."""

import sys

from reference_models.hud.cli import main

sys.exit(main())

"""``python -m reference_models.dab``: see :mod:`reference_models.dab.cli`."""

from reference_models.dab.cli import main

raise SystemExit(main())

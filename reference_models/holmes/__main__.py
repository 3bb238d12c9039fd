"""``python -m reference_models.holmes``: see :mod:`reference_models.holmes.cli`."""

from reference_models.holmes.cli import main

raise SystemExit(main())

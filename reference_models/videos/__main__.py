"""``python -m reference_models.videos`` (the ``prvr-videos`` command): see :mod:`reference_models.videos.cli`."""

from reference_models.engine import exit_process
from reference_models.videos.cli import main

exit_process(main())

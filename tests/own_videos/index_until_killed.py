"""``prvr-videos ARGS`` in which the process of rank ``$KILLED_RANK`` kills itself (SIGKILL: no clean-up, as the
out-of-memory killer or a lost node would) right after writing its first part; the other ranks run as usual.

Run under ``torchrun`` by the sharded-index tests: ``torchrun ... tests/own_videos/index_until_killed.py index ...``.
"""

from __future__ import annotations

import os
import signal


def main() -> None:
    from reference_models.engine import exit_process
    from reference_models.videos import indexing
    from reference_models.videos.cli import main as cli_main

    if os.environ.get("RANK") == os.environ["KILLED_RANK"]:
        write_part = indexing._write_part

        def write_then_die(parts, encoded):
            path = write_part(parts, encoded)
            os.kill(os.getpid(), signal.SIGKILL)
            return path

        indexing._write_part = write_then_die
    exit_process(cli_main())


if __name__ == "__main__":
    main()

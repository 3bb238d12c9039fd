"""What a run reports: the ``train.log`` file, TensorBoard scalars, progress bars and plain-text tables."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["run_logger", "tensorboard_writer", "progress", "format_table"]


def run_logger(path: Path, name: str, console: bool) -> logging.Logger:
    """The logger of one run of task ``name``, writing to ``path`` (created by the first record).

    One logger per output folder (``reference_models.<name>.<folder>``): the handlers of a previous run in
    the same folder are replaced. With ``console``, records also go to standard error as ``[<folder>] <message>``.
    """
    logger = logging.getLogger(f"reference_models.{name}.{path.parent.resolve()}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    if console:
        stream = logging.StreamHandler()
        stream.setFormatter(logging.Formatter(f"[{path.parent.name}] %(message)s"))
        logger.addHandler(stream)
    return logger


def tensorboard_writer(path: Path) -> Any:
    """A ``SummaryWriter`` into ``path``, or ``None`` when TensorBoard is not installed (it is optional)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(path))


def progress(iterable: Iterable[Any], enabled: bool, desc: str) -> Iterable[Any]:
    """``iterable`` behind a tqdm progress bar when ``enabled`` and tqdm is installed, else itself.

    The bar is drawn only on a terminal (tqdm's ``disable=None``): redirected to a file (CI, a cluster's job
    log) it writes nothing, instead of hundreds of ``\\r``-separated bar states per epoch; ``--no-progress``
    (``enabled=False``) turns it off everywhere.
    """
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is in the "reference" extra; training works without it
        return iterable
    return tqdm(iterable, desc=desc, leave=False, dynamic_ncols=True, disable=None)


def format_table(rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table: ``rows[0]`` is the header, then a rule; the first column left-aligned, the others right.

    >>> print(format_table([["model", "SumR"], ["holmes", "297.6"]]))
    model    SumR
    ------  -----
    holmes  297.6
    """
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))

    return "\n".join([line(cells[0]), line(["-" * w for w in widths]), *map(line, cells[1:])])

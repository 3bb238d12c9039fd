"""The choice parameters of the package as ``Literal`` types, for annotating code that passes them on.

Each alias is the set of values that the parameter of that name accepts; a type checker reports a value
outside it (a misspelt ``video_negative="hardset"``) where the call is written, as the run-time check does
when it runs.

Examples
--------
>>> from evidential_prvr.choices import Reduction
>>> from typing import get_args
>>> get_args(Reduction)
('mean', 'sum', 'none')
"""

from __future__ import annotations

from evidential_prvr.functional._dirichlet_loss import Reduction
from evidential_prvr.functional._evidence import TanhScaling
from evidential_prvr.functional._identification import EntropyMedian, Fusion
from evidential_prvr.functional._inter_video import CalibrationSet, InterTerm
from evidential_prvr.functional._intra_video import IntraAssignment
from evidential_prvr.functional._retrieval_losses import NCEVideoToText, VideoNegative
from evidential_prvr.functional._selective import Confidence
from evidential_prvr.functional._targets import MatchRule
from evidential_prvr.uncertainty import IdentificationRule

__all__ = ["Reduction", "TanhScaling", "EntropyMedian", "MatchRule", "Fusion", "CalibrationSet", "InterTerm",
           "IntraAssignment", "VideoNegative", "NCEVideoToText", "Confidence", "IdentificationRule"]

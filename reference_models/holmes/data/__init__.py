"""Data for the Holmes reference model: the MS-SL/GMMFormer on-disk layout, loaders and the embedded benchmark.

``load_split`` reads one split of a collection; ``make_train_loader`` / ``make_video_loader`` /
``make_query_loader`` iterate it as :class:`TrainBatch` / :class:`VideoBatch` / :class:`QueryBatch`;
``validate_data_root`` checks a data root; ``generate_embedded_benchmark`` writes a small synthetic PRVR
data set in the same layout. Importing this package registers the built-in visual-feature formats (HDF5 and
the MS-SL BigFile, :mod:`~reference_models.holmes.data.visual_formats`).
"""

from reference_models.holmes.data import bigfile_format, hdf5_format  # noqa: F401  (registers the formats)
from reference_models.holmes.data.batches import QueryBatch, TrainBatch, VideoBatch
from reference_models.holmes.data.embedded import (
    BENCHMARKS,
    EmbeddedBenchmarkSpec,
    benchmark_spec,
    generate_embedded_benchmark,
    planted_event_features,
    read_planted_events,
    read_planted_types,
)
from reference_models.engine.errors import DataValidationError
from reference_models.holmes.data.loaders import (
    OrderedLoader,
    TrainLoader,
    make_query_loader,
    make_train_loader,
    make_video_loader,
)
from reference_models.holmes.data.split import PRVRSplit, fingerprint_differences, load_split
from reference_models.holmes.data.validation import validate_data_root, video_overlap_warnings
from reference_models.holmes.data.visual_formats import (
    VisualFeatureFormat,
    register_visual_format,
    visual_format,
    visual_format_names,
)

__all__ = [
    "load_split",
    "PRVRSplit",
    "TrainBatch",
    "VideoBatch",
    "QueryBatch",
    "TrainLoader",
    "OrderedLoader",
    "make_train_loader",
    "make_video_loader",
    "make_query_loader",
    "validate_data_root",
    "video_overlap_warnings",
    "fingerprint_differences",
    "DataValidationError",
    "generate_embedded_benchmark",
    "EmbeddedBenchmarkSpec",
    "BENCHMARKS",
    "benchmark_spec",
    "read_planted_types",
    "read_planted_events",
    "planted_event_features",
    "VisualFeatureFormat",
    "register_visual_format",
    "visual_format",
    "visual_format_names",
]

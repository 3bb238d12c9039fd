"""The training engine shared by every reference model (``holmes``, ``hud``, ``dab``).

A reference model is one :class:`TrainingTask` (its data, model, objective, optimiser and metrics); the
:class:`Trainer` runs it with the same loop, run folder, checkpoints, exact resume, divergence guard, log,
TensorBoard scalars and progress bars for all; :mod:`reference_models.engine.cli` gives every command line
the same one-line errors (exit status 2), flags and strict ``results.json``. Tasks import from here only.
"""

from reference_models.engine.checkpoint import (
    RUN_OUTPUTS,
    CheckpointError,
    atomic_write,
    capture_rng_state,
    load_checkpoint,
    remove_orphan_temporaries,
    require_keys,
    restore_rng_state,
    save_checkpoint,
    seed_everything,
)
from reference_models.engine.cli import (
    EXIT_USER_ERROR,
    OneLineParser,
    add_device_arguments,
    add_threads_argument,
    add_distributed_arguments,
    add_host_memory_argument,
    add_output_arguments,
    add_run_arguments,
    claim_output_folder,
    device_arg,
    finite_or_none,
    int_at_least,
    positive_number,
    print_line,
    read_json_file,
    run_main,
    user_message,
    write_json,
    write_text,
)
from reference_models.engine.seed_grid import ComparisonRunner, ComparisonSpec, QueryRanks
from reference_models.engine.distributed import (
    DistributedRun,
    PeerStoppedError,
    ProcessGroupError,
    exit_process,
    launched_ranks,
    process_group_from_environment,
    rank_device,
    shard_bounds,
)
from reference_models.engine.errors import (
    DataValidationError,
    NonFiniteOutputError,
    ResumeMismatchError,
    TrainingDivergedError,
    UserError,
    check_choice,
)
from reference_models.engine.fingerprint import fingerprint_differences
from reference_models.engine.optimization import (
    GRAD_CLIP_MODES,
    LR_SCHEDULES,
    bert_warmup_linear,
    build_scheduler,
    clip_gradients,
    warmup_linear_decay,
)
from reference_models.engine.reporting import format_table, progress, run_logger, tensorboard_writer
from reference_models.engine.run_folder import (
    LOCK_NAME,
    OutputFolderError,
    RunLock,
    clear_run,
    existing_run_files,
    holds_runs,
    prepare_output_folder,
    unused_folder,
)
from reference_models.engine.task import StepTerms, TotalTerms, TrainingSchedule, TrainingTask
from reference_models.engine.trainer import (
    Trainer,
    TrainResult,
    all_finite,
    autocast_context,
)

__all__ = [
    "TrainingTask", "TrainingSchedule", "StepTerms", "TotalTerms", "ComparisonSpec", "QueryRanks", "ComparisonRunner",
    "Trainer", "TrainResult", "ResumeMismatchError", "TrainingDivergedError", "NonFiniteOutputError",
    "autocast_context", "all_finite",
    "UserError", "DataValidationError", "check_choice",
    "CheckpointError", "RUN_OUTPUTS", "atomic_write", "save_checkpoint", "load_checkpoint", "require_keys",
    "remove_orphan_temporaries", "seed_everything", "capture_rng_state", "restore_rng_state",
    "RunLock", "LOCK_NAME", "OutputFolderError", "prepare_output_folder", "existing_run_files", "clear_run",
    "holds_runs", "unused_folder",
    "clip_gradients", "build_scheduler", "warmup_linear_decay", "bert_warmup_linear", "LR_SCHEDULES",
    "GRAD_CLIP_MODES",
    "fingerprint_differences",
    "DistributedRun", "PeerStoppedError", "ProcessGroupError", "exit_process", "launched_ranks", "process_group_from_environment",
    "rank_device",
    "shard_bounds",
    "add_distributed_arguments", "add_host_memory_argument",
    "run_logger", "tensorboard_writer", "progress",
    "EXIT_USER_ERROR", "OneLineParser", "int_at_least", "positive_number", "device_arg", "add_device_arguments", "add_threads_argument",
    "add_output_arguments", "add_run_arguments", "claim_output_folder", "read_json_file", "run_main", "user_message", "print_line",
    "write_text", "write_json", "finite_or_none", "format_table",
]

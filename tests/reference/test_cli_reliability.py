"""The command line against a hostile but realistic user: bad files, reused folders, bad flags, NaN features.

Every failure that is the user's doing must be one line on stderr naming the file, flag or value, with exit
status 2 and no traceback; nothing may be reported under a wrong name or silently overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from reference_models.engine import LOCK_NAME, RunLock
from tests.reference.data_helpers import COLLECTION, make_micro_benchmark
from tests.reference.run_helpers import FEATURE, data_args, main, run_cli, train_args, write_config

RUN_FILES = ("last.pt", "best.pt", "config.json", "results.json")


# --- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def micro_root(tmp_path_factory):
    return make_micro_benchmark(tmp_path_factory.mktemp("micro"))


@pytest.fixture
def root(micro_root, tmp_path):
    """A writable copy of the micro benchmark."""
    return shutil.copytree(micro_root, tmp_path / "data")


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("cfg") / "micro.json")


@pytest.fixture(scope="module")
def finished_run(micro_root, config_file, tmp_path_factory):
    """A completed one-epoch run on the micro benchmark (trained once for the whole module)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(train_args(micro_root, out, config_file)) == 0
    return out


@pytest.fixture
def run_copy(finished_run, tmp_path):
    """A writable copy of the finished run's folder."""
    return shutil.copytree(finished_run, tmp_path / "run")


def caption_file(root, split):
    return root / COLLECTION / "TextData" / f"{COLLECTION}{split}.caption.txt"


def text_features(root):
    return root / COLLECTION / "TextData" / f"roberta_{COLLECTION}_query_feat.hdf5"


def visual_features(root):
    return root / COLLECTION / "FeatureData" / FEATURE / "feature.hdf5"


def first_id(root, split):
    return caption_file(root, split).read_text().split(" ", 1)[0]


def snapshot(folder):
    """Bytes and modification times of a run's outputs."""
    return {n: ((folder / n).read_bytes(), (folder / n).stat().st_mtime_ns) for n in RUN_FILES if (folder / n).exists()}


def dead_pid() -> int:
    """The id of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# --- the test split: only a missing file falls back to val ------------------------------------------------
def test_an_invalid_test_caption_file_fails_train(root, config_file, tmp_path, capsys):
    path = caption_file(root, "test")
    path.write_text(path.read_text() + path.read_text().splitlines()[0] + "\n")
    out = tmp_path / "run"
    run = run_cli(capsys, *train_args(root, out, config_file))
    run.only_error_line(f"{COLLECTION}test.caption.txt", "duplicate caption id")
    assert not out.exists()  # refused before anything was trained or written


def test_an_invalid_test_caption_file_fails_evaluate(finished_run, root, capsys):
    caption_file(root, "test").write_bytes(b"\xffbad#enc#0 not utf-8\n")
    run = run_cli(capsys, "evaluate", "--checkpoint", finished_run / "best.pt", *data_args(root), "--device", "cpu",
                  "--split", "test")
    run.only_error_line(f"{COLLECTION}test.caption.txt", "not UTF-8", "byte offset 0")


def test_a_missing_test_file_falls_back_to_val_loudly(root, config_file, tmp_path, capsys, finished_run):
    caption_file(root, "test").unlink()
    out = tmp_path / "run"
    run = run_cli(capsys, *train_args(root, out, config_file))
    assert run.rc == 0, run.err
    assert "warning: no test caption file" in run.err and "VAL split: no test file" in run.out
    results = json.loads((out / "results.json").read_text())
    assert results["test_split"] == "val" and "no test caption file" in results["test_split_note"]

    report = tmp_path / "eval.json"
    run = run_cli(capsys, "evaluate", "--checkpoint", finished_run / "best.pt", *data_args(root), "--device", "cpu",
                  "--split", "test", "--output", report)
    assert run.rc == 0 and "VAL split: no test file" in run.out and "no test caption file" in run.err
    written = json.loads(report.read_text())
    assert written["split"] == "val" and "no test caption file" in written["split_note"]


# --- the output folder: no silent overwrite, one run at a time ----------------------------------------------
def test_train_refuses_a_folder_that_holds_a_run(run_copy, micro_root, config_file, capsys):
    before = snapshot(run_copy)
    run = run_cli(capsys, *train_args(micro_root, run_copy, config_file))
    run.only_error_line(str(run_copy), "already holds a run", "--resume", "--overwrite")
    assert snapshot(run_copy) == before


def test_overwrite_replaces_a_run_and_takes_over_a_stale_lock(run_copy, micro_root, config_file, capsys):
    pid = dead_pid()
    (run_copy / LOCK_NAME).write_text(f"{pid} somehost\n")
    before = snapshot(run_copy)
    run = run_cli(capsys, *train_args(micro_root, run_copy, config_file, "--overwrite"))
    assert run.rc == 0, run.err
    assert f"took over the lock of process {pid} on somehost, which is no longer running" in run.err
    assert not (run_copy / LOCK_NAME).exists()
    after = snapshot(run_copy)
    assert set(after) == set(RUN_FILES) and all(after[n][1] > before[n][1] for n in RUN_FILES)


def test_a_folder_in_use_by_another_run_is_refused(micro_root, config_file, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    with RunLock(out):
        run = run_cli(capsys, *train_args(micro_root, out, config_file))
        assert (out / LOCK_NAME).exists()
    run.only_error_line(str(out), f"in use by process {os.getpid()}")
    assert sorted(p.name for p in out.iterdir()) == []


def test_a_second_run_in_the_same_process_after_the_first_ends_is_allowed(micro_root, config_file, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with RunLock(out):
        pass
    with RunLock(out) as lock:
        assert lock.takeover is None  # a cleanly released lock leaves nothing to take over


# --- resume: same config, seed and data, or a one-line refusal that leaves the folder alone -----------------
def test_resume_on_other_data_with_the_same_sizes_is_refused(run_copy, config_file, tmp_path, capsys):
    other = make_micro_benchmark(tmp_path / "other", n_train_videos=7)
    before = snapshot(run_copy)
    run = run_cli(capsys, *train_args(other, run_copy, config_file, "--resume"))
    line = run.only_error_line("last.pt", "different data", "train videos 8 vs 7", "train caption_ids differ")
    assert "seed" not in line.split("(checkpoint vs now)")[0].split("data")[0]
    assert snapshot(run_copy) == before


def test_resume_with_other_feature_sizes_is_refused_in_one_line(run_copy, config_file, tmp_path, capsys):
    other = make_micro_benchmark(tmp_path / "wide", visual_dim=11)
    run = run_cli(capsys, *train_args(other, run_copy, config_file, "--resume"))
    run.only_error_line("last.pt", "different data", "train visual_dim 8 vs 11")


def test_refused_resume_says_what_differs_and_keeps_config_json(run_copy, micro_root, tmp_path, capsys):
    other_config = write_config(tmp_path / "other.json", lr=5e-4)
    before = snapshot(run_copy)
    run = run_cli(capsys, *train_args(micro_root, run_copy, other_config, "--resume"))
    line = run.only_error_line("last.pt", "different config", "optim.lr 0.001 vs 0.0005")
    assert "seed" not in line.split("(checkpoint vs now)")[0]
    assert snapshot(run_copy) == before


def test_resume_with_the_same_settings_still_works(run_copy, micro_root, config_file, capsys):
    run = run_cli(capsys, *train_args(micro_root, run_copy, config_file, "--resume"))
    assert run.rc == 0, run.err


# --- non-finite features ----------------------------------------------------------------------------
def test_nan_in_a_training_video_fails_train_naming_file_and_video(root, config_file, tmp_path, capsys):
    vid = first_id(root, "train").split("#")[0]
    with h5py.File(visual_features(root), "a") as f:
        data = f[vid][...]
        data[-1, 0] = np.nan
        del f[vid]
        f.create_dataset(vid, data=data)
    run = run_cli(capsys, *train_args(root, tmp_path / "run", config_file))
    run.error_line("feature.hdf5", f"video {vid!r}", "non-finite", "nan")


def test_inf_in_a_test_caption_fails_train_before_training(root, config_file, tmp_path, capsys):
    cid = first_id(root, "test")
    with h5py.File(text_features(root), "a") as f:
        data = f[cid][...]
        data[0, 1] = np.inf
        del f[cid]
        f.create_dataset(cid, data=data)
    out = tmp_path / "run"
    run = run_cli(capsys, *train_args(root, out, config_file))
    run.only_error_line("query_feat.hdf5", f"caption {cid!r}", "non-finite", "inf")
    assert not (out / "last.pt").exists() and not (out / "config.json").exists()


# --- one-line errors ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--epochs", "0", "must be >= 1, got 0"),
        ("--lr", "nan", "must be a finite number > 0, got 'nan'"),
        ("--lr", "0", "must be a finite number > 0, got '0'"),
        ("--videos-per-batch", "1", "must be >= 2"),
        ("--seed", "-1", "must be >= 0"),
        ("--num-workers", "two", "expected an integer, got 'two'"),
        ("--device", "nonsense", "not a torch device"),
    ],
)
def test_bad_flag_values_are_one_line(micro_root, config_file, tmp_path, capsys, flag, value, expected):
    run = run_cli(capsys, *train_args(micro_root, tmp_path / "run", config_file, flag, value))
    run.only_error_line(f"argument {flag}", expected)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_cuda_is_one_line(micro_root, config_file, tmp_path, capsys):
    run = run_cli(capsys, *train_args(micro_root, tmp_path / "run", config_file, "--device", "cuda"))
    run.only_error_line("argument --device", "CUDA is not available")
    run = run_cli(capsys, "evaluate", "--checkpoint", tmp_path / "x.pt", *data_args(micro_root), "--device", "cuda")
    run.only_error_line("argument --device", "CUDA is not available")


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "no such file"),
        (b"{not json", "not valid JSON"),
        (b'{"optim": {"epochz": 3}}', "unknown keys ['epochz']"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_bad_config_files_are_one_line(micro_root, tmp_path, capsys, content, expected):
    path = tmp_path / "cfg.json"
    if content is not None:
        path.write_bytes(content)
    run = run_cli(capsys, *train_args(micro_root, tmp_path / "run", path))
    run.only_error_line(f"--config-file {path}", expected)


def test_a_config_file_with_one_video_per_batch_is_refused(micro_root, tmp_path, capsys):
    path = write_config(tmp_path / "cfg.json", videos_per_batch=1)
    run = run_cli(capsys, *train_args(micro_root, tmp_path / "run", path))
    run.only_error_line(f"--config-file {path}", "optim.videos_per_batch must be >= 2", "got 1")


def test_a_config_file_that_is_a_folder_is_one_line(micro_root, tmp_path, capsys):
    run = run_cli(capsys, *train_args(micro_root, tmp_path / "run", tmp_path))
    run.only_error_line("--config-file", "is a folder")


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_last_pt_fails_resume_in_one_line(run_copy, micro_root, config_file, capsys, damage):
    last = run_copy / "last.pt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2] if damage == "truncate" else os.urandom(len(data)))
    run = run_cli(capsys, *train_args(micro_root, run_copy, config_file, "--resume"))
    run.only_error_line(str(last), "truncated or corrupted", "--overwrite")


def test_evaluate_checkpoint_errors_are_one_line(run_copy, micro_root, tmp_path, capsys):
    def evaluate(checkpoint):
        return run_cli(capsys, "evaluate", "--checkpoint", checkpoint, *data_args(micro_root), "--device", "cpu")

    evaluate(tmp_path / "nothere.pt").only_error_line("nothere.pt", "no such file")
    evaluate(run_copy).only_error_line(str(run_copy), "is a folder")
    best = run_copy / "best.pt"
    best.write_bytes(best.read_bytes()[:100])
    evaluate(best).only_error_line(str(best), "truncated or corrupted")
    torch.save({"weights": torch.ones(2)}, tmp_path / "foreign.pt")
    evaluate(tmp_path / "foreign.pt").only_error_line("foreign.pt", "missing 'config'")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")
def test_a_read_only_output_folder_is_one_line(micro_root, config_file, tmp_path, capsys):
    out = tmp_path / "readonly"
    out.mkdir()
    out.chmod(0o555)
    try:
        run = run_cli(capsys, *train_args(micro_root, out, config_file))
    finally:
        out.chmod(0o755)
    run.only_error_line(f"--output-dir {out}", "cannot write there")


def test_an_unwritable_output_folder_is_one_line_even_for_root(micro_root, config_file, tmp_path, capsys,
                                                                 monkeypatch):
    from reference_models.engine import run_folder

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(run_folder.os, "open", refuse)
    out = tmp_path / "run"
    run = run_cli(capsys, *train_args(micro_root, out, config_file))
    monkeypatch.undo()
    run.only_error_line(f"--output-dir {out}", "cannot write there (Permission denied)")


def test_an_output_dir_that_is_a_file_is_one_line(micro_root, config_file, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    run = run_cli(capsys, *train_args(micro_root, tmp_path / "file", config_file))
    run.only_error_line(f"--output-dir {tmp_path / 'file'}", "not a folder")


@pytest.mark.parametrize("optimizer", ["adamw", "bert_adam"])
def test_divergence_names_epoch_and_step_and_lr_flag(micro_root, tmp_path, capsys, optimizer):
    # bert_adam clips each tensor inside the optimiser: the trainer reads the gradient norm on its own
    config_file = write_config(tmp_path / "micro.json", optimizer=optimizer,
                               grad_clip_mode="per_parameter" if optimizer == "bert_adam" else "global")
    run = run_cli(capsys, *train_args(micro_root, tmp_path / "run", config_file, "--lr", "1e30"))
    line = run.error_line("loss became non-finite at epoch 1 step", "lower --lr")
    assert "scores must be finite" not in run.err
    assert not (tmp_path / "run" / "last.pt").exists(), line  # no checkpoint of diverged weights


@pytest.mark.parametrize("split", ["train", "test"])
def test_non_utf8_caption_file_is_one_line_naming_the_byte_offset(root, config_file, tmp_path, capsys, split):
    path = caption_file(root, split)
    good = path.read_bytes()
    path.write_bytes(good[:7] + b"\xe9" + good[8:])
    run = run_cli(capsys, *train_args(root, tmp_path / "run", config_file))
    run.only_error_line(path.name, "not UTF-8", "byte 0xe9 at byte offset 7")
    run = run_cli(capsys, "validate", *data_args(root))
    assert run.rc == 2 and "byte offset 7" in run.err_lines[-1]


@pytest.mark.parametrize("entry", ["group", "string"])
def test_an_hdf5_entry_that_is_not_numbers_is_one_line(root, config_file, tmp_path, capsys, entry):
    vid = first_id(root, "val").split("#")[0]
    with h5py.File(visual_features(root), "a") as f:
        del f[vid]
        if entry == "group":
            f.create_group(vid)
        else:
            f.create_dataset(vid, data=np.array([[b"a", b"b"], [b"c", b"d"]]))
    expected = "is an HDF5 group" if entry == "group" else "is a string dataset"
    run_cli(capsys, *train_args(root, tmp_path / "run", config_file)).only_error_line(
        "feature.hdf5", f"video {vid!r}", expected)
    run_cli(capsys, "validate", *data_args(root)).only_error_line("feature.hdf5", f"video {vid!r}", expected)


def test_a_caption_file_with_a_byte_order_mark_is_accepted(root, config_file, tmp_path, capsys):
    for split in ("train", "val", "test"):
        path = caption_file(root, split)
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert run_cli(capsys, "validate", *data_args(root)).rc == 0
    run = run_cli(capsys, *train_args(root, tmp_path / "run", config_file))
    assert run.rc == 0, run.err


def test_videos_shared_between_train_and_test_are_a_warning(root, config_file, tmp_path, capsys):
    train_vid = first_id(root, "train").split("#")[0]
    test_path = caption_file(root, "test")
    cid = f"{train_vid}#enc#99"
    test_path.write_text(test_path.read_text() + f"{cid} a leaked caption\n")
    with h5py.File(text_features(root), "a") as f:
        f.create_dataset(cid, data=np.ones((3, 6), np.float32))
    run = run_cli(capsys, "validate", *data_args(root))
    assert run.rc == 0, run.err
    assert run.err_lines == [
        f"warning: 1 video of the test split ({COLLECTION}test.caption.txt) is also in the train split "
        f"(e.g. {train_vid!r}): test metrics may be optimistic"
    ]
    run = run_cli(capsys, *train_args(root, tmp_path / "run", config_file))
    assert run.rc == 0 and f"is also in the train split (e.g. {train_vid!r})" in run.err


# --- temporary files and file modes ---------------------------------------------------------------
def test_orphan_temporaries_of_an_interrupted_write_are_removed_on_the_next_start(run_copy, micro_root, config_file,
                                                                                  capsys):
    orphans = [run_copy / ".last.pt.k2j3h4ab.tmp", run_copy / ".best.pt.x8y9.tmp", run_copy / "results.json.tmp"]
    for orphan in orphans:
        orphan.write_bytes(b"partial")
    keep = run_copy / ".mine.tmp"
    keep.write_text("not ours")
    run = run_cli(capsys, *train_args(micro_root, run_copy, config_file, "--resume"))
    assert run.rc == 0, run.err
    assert not any(o.exists() for o in orphans) and keep.exists()
    assert all(f"note: removed {o}" in run.err for o in orphans)


def test_checkpoints_have_the_mode_of_the_other_outputs(finished_run):
    modes = {n: stat.S_IMODE((finished_run / n).stat().st_mode) for n in RUN_FILES}
    assert len(set(modes.values())) == 1, modes

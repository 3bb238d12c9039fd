"""Caption-file parsing of the MS-SL layout."""

from __future__ import annotations

import pytest

from reference_models.holmes.data import DataValidationError
from reference_models.holmes.data.layout import parse_caption_line, read_captions, video_id_of


def test_split_at_first_space_keeps_the_sentence_whole():
    cap = parse_caption_line("v_abc-12#enc#3 A man  opens the door, then  #leaves.\n")
    assert cap.caption_id == "v_abc-12#enc#3"
    assert cap.video_id == "v_abc-12"
    assert cap.sentence == "A man  opens the door, then  #leaves."


@pytest.mark.parametrize(
    ("caption_id", "video_id"),
    [("friends_s01e01_seg02_clip_00#enc#0", "friends_s01e01_seg02_clip_00"), ("AO8RW#enc#12", "AO8RW"),
     ("plainid", "plainid"), ("a#b#c", "a")],
)
def test_video_id_is_the_text_before_the_first_hash(caption_id, video_id):
    assert video_id_of(caption_id) == video_id


def test_blank_line_is_skipped_and_id_only_line_has_empty_sentence():
    assert parse_caption_line("   \n") is None
    cap = parse_caption_line("vid#enc#0\n")
    assert (cap.caption_id, cap.video_id, cap.sentence) == ("vid#enc#0", "vid", "")


def test_read_captions_keeps_file_order(tmp_path):
    path = tmp_path / "ctrain.caption.txt"
    path.write_text("b#enc#0 second video first\n\na#enc#0 x y\nb#enc#1 z\r\n", encoding="utf-8")
    caps = read_captions(path)
    assert [c.caption_id for c in caps] == ["b#enc#0", "a#enc#0", "b#enc#1"]
    assert [c.video_id for c in caps] == ["b", "a", "b"]
    assert caps[2].sentence == "z"


def test_read_captions_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.caption.txt"
    with pytest.raises(DataValidationError, match="nope.caption.txt: missing caption file"):
        read_captions(missing)
    dup = tmp_path / "dup.caption.txt"
    dup.write_text("a#enc#0 x\na#enc#0 y\n", encoding="utf-8")
    with pytest.raises(DataValidationError, match=r"dup.caption.txt: line 2: duplicate caption id"):
        read_captions(dup)
    empty = tmp_path / "empty.caption.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataValidationError, match="empty.caption.txt: caption file holds no captions"):
        read_captions(empty)
    noid = tmp_path / "noid.caption.txt"
    noid.write_text("#enc#0 x\n", encoding="utf-8")
    with pytest.raises(DataValidationError, match="noid.caption.txt: line 1"):
        read_captions(noid)

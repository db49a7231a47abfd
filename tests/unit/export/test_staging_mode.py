"""A staged export folder ends with the permissions of a plain ``mkdir`` (not mkdtemp's 0700)."""

from __future__ import annotations

import os

from libreyolo.export.staging import META_FILE, staged_folder


def test_staged_folder_gets_the_mode_of_a_plain_mkdir(tmp_path):
    (tmp_path / "plain").mkdir()
    want = (tmp_path / "plain").stat().st_mode & 0o777
    with staged_folder(tmp_path / "model_export", {"format": "x"}) as scratch:
        (scratch / "weights.bin").write_bytes(b"0")
        assert scratch.stat().st_mode & 0o777 == 0o700  # private while it is written
    out = tmp_path / "model_export"
    assert (out / META_FILE).is_file() and (out / "weights.bin").is_file()
    assert out.stat().st_mode & 0o777 == want
    assert sorted(os.listdir(tmp_path)) == ["model_export", "plain"]  # no scratch or probe left

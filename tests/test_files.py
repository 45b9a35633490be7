"""``convsuite._files``: atomic writes with a fallback, strict JSON, checks before the work, capped reads.

The writers used to be ``write_text``/``json.dump``/``np.savez``/``savefig``
straight into the target: a failure mid-way left half a file (or none) and
the computed data was lost, and ``json.dumps`` wrote NaN and Infinity, which
are not JSON.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat

import numpy as np
import pytest

from convsuite import _files
from convsuite._files import (
    NON_FINITE_KEY,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_writable_file,
    json_text,
    read_json,
    read_text,
)


def _strict(text: str):
    """Parse as strict JSON: NaN, Infinity and -Infinity are refused."""

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _leftovers(folder) -> list[str]:
    """Temporary files an atomic write left behind."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# --- atomic writes ------------------------------------------------------------------------------------------


def test_atomic_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "data.json"
    atomic_write_text(path, "old")
    saved = atomic_write_text(path, "new")
    assert saved.path == path and not saved.moved and saved.warning is None
    assert path.read_text() == "new" and _leftovers(tmp_path) == []


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "data.json"
    path.write_text("old and whole")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(path, "new")
    assert path.read_text() == "old and whole" and _leftovers(tmp_path) == []


def test_a_failed_write_falls_back_next_to_the_file_and_says_where(tmp_path, monkeypatch):
    path = tmp_path / "results.json"

    def refused(tmp, target):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refused)
    saved = atomic_write_bytes(path, b"the measurements", fallback=True)
    assert saved.moved and saved.path != path and saved.path.parent == tmp_path
    assert saved.path.read_bytes() == b"the measurements" and saved.path.suffix == ".json"
    assert saved.warning == f"could not write {path} (Permission denied); saved it to {saved.path} instead"
    assert not path.exists() and _leftovers(tmp_path) == []


def test_the_fallback_goes_to_the_temporary_folder_when_the_folder_is_gone(tmp_path, monkeypatch):
    elsewhere = tmp_path / "tmp"
    elsewhere.mkdir()
    monkeypatch.setattr(_files.tempfile, "gettempdir", lambda: str(elsewhere))
    path = tmp_path / "removed" / "train.json"  # its folder does not exist (removed during the run)
    saved = atomic_write_json(path, {"accuracy": 0.9}, fallback=True)
    assert saved.path.parent == elsewhere and _strict(saved.path.read_text()) == {"accuracy": 0.9}
    assert "No such file or directory" in saved.warning and str(saved.path) in saved.warning


def test_a_folder_in_the_way_falls_back_too(tmp_path):
    (tmp_path / "sweep.json").mkdir()
    saved = atomic_write_text(tmp_path / "sweep.json", "{}", fallback=True)
    assert saved.moved and saved.path.read_text() == "{}" and "it is a folder" in saved.warning
    with pytest.raises(IsADirectoryError):
        atomic_write_text(tmp_path / "sweep.json", "{}")


def test_new_files_get_the_umask_permissions_and_old_ones_keep_theirs(tmp_path):
    umask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "new.txt", "x")
        assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o644  # mkstemp's files are 0600
        (tmp_path / "kept.txt").write_text("x")
        os.chmod(tmp_path / "kept.txt", 0o640)
        atomic_write_text(tmp_path / "kept.txt", "y")
        assert stat.S_IMODE((tmp_path / "kept.txt").stat().st_mode) == 0o640
    finally:
        os.umask(umask)


def test_a_symbolic_link_is_followed(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    atomic_write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_numpy_savez_and_savefig_go_through_bytes(tmp_path):
    """The two writers that wanted a path: they write into a buffer, the buffer is written atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, w=np.arange(6.0).reshape(2, 3))
    atomic_write_bytes(tmp_path / "w.npz", buffer.getvalue())
    np.testing.assert_array_equal(np.load(tmp_path / "w.npz")["w"], np.arange(6.0).reshape(2, 3))


# --- strict JSON --------------------------------------------------------------------------------------------


def test_non_finite_numbers_are_null_with_a_note():
    document = {"loss": [2.3, math.nan], "best": {"ms": math.inf}, "low": np.float32(-np.inf), "ok": 1.5}
    data = _strict(json_text(document))
    assert data["loss"] == [2.3, None] and data["best"] == {"ms": None} and data["low"] is None and data["ok"] == 1.5
    assert data[NON_FINITE_KEY]["values"] == {"loss[1]": "nan", "best.ms": "inf", "low": "-inf"}
    assert "JSON cannot hold" in data[NON_FINITE_KEY]["note"]
    assert NON_FINITE_KEY not in _strict(json_text({"a": 1.0}))  # no note when every number is finite


def test_numpy_values_and_odd_keys_become_plain_json():
    document = {
        "i": np.int64(3),
        "f": np.float32(0.5),
        "b": np.bool_(True),
        "a": np.arange(3),
        "t": (1, 2),
        3: "int key",
        "dtype": np.dtype("float32"),
    }
    data = _strict(json_text(document))
    assert data == {"i": 3, "f": 0.5, "b": True, "a": [0, 1, 2], "t": [1, 2], "3": "int key", "dtype": "float32"}


def test_json_text_wants_a_mapping_for_its_note():
    with pytest.raises(TypeError, match="a JSON document written by convsuite is a mapping; got list"):
        json_text([math.nan])


# --- checks before the work ---------------------------------------------------------------------------------


def test_check_writable_file_refuses_what_would_fail_after_the_work(tmp_path):
    (tmp_path / "train.json").mkdir()
    with pytest.raises(ValueError, match=r"--out '.*train.json' is a folder, not a file that can be written"):
        check_writable_file(tmp_path / "train.json", "--out")
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match=r"--out '.*afile/x.json' cannot be written: '.*afile' is a file"):
        check_writable_file(tmp_path / "afile" / "x.json", "--out")
    with pytest.raises(ValueError, match="`path` must be a file path; got ''"):
        check_writable_file("", "`path`")
    made = check_writable_file(tmp_path / "new" / "sub" / "ok.json", "--out")
    assert made.parent.is_dir() and not made.exists() and _leftovers(made.parent) == []


# --- reading ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"results": [{"case": "a", "gflops": 1.', "not JSON: it ends early"),
        (b'{"results": [{"case": "a", "contender": "num', "not JSON: it ends early"),
        (b"", "not JSON: it ends early"),
        (b"\xff\xfe binary", "not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "its JSON is nested too deeply"),
        (b'{"n": ' + b"9" * 5000 + b"}", "not readable JSON"),
        (b"{not json}", "not JSON \\(Expecting property name"),
    ],
)
def test_read_json_names_the_file_and_the_problem(tmp_path, content, message):
    path = tmp_path / "results.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^my file: {message}"):
        read_json(path, "my file")


def test_read_json_takes_a_byte_order_mark(tmp_path):
    path = tmp_path / "cases.json"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}')
    assert read_json(path, "f") == {"a": 1}


def test_read_text_caps_what_it_reads(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 2000)
    assert read_text(path, "f", max_bytes=2000) == " " * 2000
    with pytest.raises(ValueError, match="f: larger than the 1,999 bytes such a file can be"):
        read_text(path, "f", max_bytes=1999)
    with pytest.raises(ValueError, match="f: is a folder, not a file"):
        read_text(tmp_path, "f")
    with pytest.raises(ValueError, match="f: cannot be read \\(No such file or directory\\)"):
        read_text(tmp_path / "missing.json", "f")

"""The saved-gate directory: JSON and arrays with checksums, refused once tampered with."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptive_gates.errors import GateLoadError
from adaptive_gates.persistence.saved_format import (
    CHECKSUMS_FIELD,
    CONFIG_FILE,
    FORMAT,
    FORMAT_VERSION,
    check_save_target,
    check_saved_backend,
    config_field,
    library_versions,
    load_array,
    read_config,
    read_json_file,
    safe_member_path,
    save_array,
    save_directory,
    with_checksums,
    write_directory,
)

WEIGHTS = np.arange(12, dtype=np.float32).reshape(3, 4)


def _save(path, *, overwrite=False, threshold=0.5, member=False):
    def write_files(folder):
        save_array(folder, "weights.npy", WEIGHTS)
        if member:
            (folder / "member").mkdir()
            write_directory(folder / "member", {"gate": "inner"}, lambda f: {"bias": 1})
        return {"labels": ["no", "yes"]}

    return save_directory(
        path,
        lambda folder: write_directory(folder, {"gate": "toy", "threshold": threshold}, write_files),
        overwrite=overwrite,
    )


def _rewrite_config(path, change):
    config = json.loads((path / CONFIG_FILE).read_text())
    change(config)
    (path / CONFIG_FILE).write_text(json.dumps(config, indent=4))


def test_a_saved_directory_reads_back_verified(tmp_path):
    path = _save(tmp_path / "gate", member=True)
    config = read_config(path)
    assert config["format"] == FORMAT
    assert config["format_version"] == FORMAT_VERSION
    assert (config["gate"], config["threshold"], config["state"]) == ("toy", 0.5, {"labels": ["no", "yes"]})
    assert set(config["files"]) == {"weights.npy"}
    assert set(config["folders"]) == {"member"}
    assert read_config(path / "member")["state"] == {"bias": 1}
    loaded = load_array(path, "weights.npy", kinds="f", ndim=2)
    np.testing.assert_array_equal(loaded, WEIGHTS)
    assert loaded.dtype == np.float32


def test_reindenting_and_reordering_config_keeps_it_valid(tmp_path):
    path = _save(tmp_path / "gate")
    config = json.loads((path / CONFIG_FILE).read_text())
    (path / CONFIG_FILE).write_text(json.dumps(dict(reversed(list(config.items()))), separators=(",", ":")))
    assert read_config(path)["threshold"] == 0.5


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda c: c.update(threshold=0.1), "field 'threshold' was changed"),
        (lambda c: c.update(extra=1), "field 'extra' was added"),
        (lambda c: c.pop("gate"), "field 'gate' was removed"),
    ],
)
def test_an_edited_field_is_refused(tmp_path, change, problem):
    path = _save(tmp_path / "gate")
    _rewrite_config(path, change)
    with pytest.raises(GateLoadError, match=f"modified after saving \\({problem}"):
        read_config(path)


def test_a_config_without_checksums_is_refused(tmp_path):
    path = _save(tmp_path / "gate")
    _rewrite_config(path, lambda c: c.pop(CHECKSUMS_FIELD))
    with pytest.raises(GateLoadError, match="field 'checksums' is missing"):
        read_config(path)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("format", "other/thing", "field 'format' is 'other/thing'"),
        ("format_version", 1, "carries no checksums"),
        ("format_version", 99, "field 'format_version' is 99; this version of adaptive-gates reads version 2"),
    ],
)
def test_another_format_is_refused(tmp_path, field, value, message):
    path = _save(tmp_path / "gate")
    _rewrite_config(path, lambda c: c.update(with_checksums({**c, field: value})))
    with pytest.raises(GateLoadError, match=message):
        read_config(path)


def test_a_modified_or_missing_file_is_refused(tmp_path):
    path = _save(tmp_path / "gate", member=True)
    save_array(path, "weights.npy", WEIGHTS * 2)
    with pytest.raises(GateLoadError, match=r"file 'weights\.npy' does not match its checksum"):
        read_config(path)
    (path / "weights.npy").unlink()
    with pytest.raises(GateLoadError, match=r"missing file 'weights\.npy'"):
        read_config(path)


def test_a_modified_member_is_refused_by_its_holder(tmp_path):
    path = _save(tmp_path / "gate", member=True)
    _rewrite_config(path / "member", lambda c: c.update(with_checksums({**c, "state": {"bias": 2}})))
    read_config(path / "member")  # consistent on its own
    with pytest.raises(GateLoadError, match=r"file 'member/config\.json' does not match its checksum"):
        read_config(path)


def test_links_and_escaping_names_are_refused(tmp_path):
    path = _save(tmp_path / "gate")
    (tmp_path / "secret.npy").write_bytes(b"x")
    (path / "link.npy").symlink_to(tmp_path / "secret.npy")
    with pytest.raises(GateLoadError, match=r"holds symbolic links \(link\.npy\)"):
        read_config(path)
    with pytest.raises(GateLoadError, match="a symbolic link"):
        safe_member_path(path, "link.npy", "files")
    for name in ["../secret.npy", "/etc/passwd", "..", ".", "", "a\\b", "a\0b", 3, None]:
        with pytest.raises(GateLoadError, match="not a plain file name inside the gate's directory"):
            safe_member_path(path, name, "files")
    assert safe_member_path(path, "weights.npy", "files") == path / "weights.npy"


def test_read_config_of_a_missing_directory(tmp_path):
    with pytest.raises(GateLoadError, match="not a saved gate directory"):
        read_config(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe", r"not valid UTF-8 \(byte 1\)"),
        (b'{"a": NaN}', "not readable JSON"),
        (b"[" * 100, "nested 100 levels deep"),
    ],
)
def test_read_json_file_names_what_is_wrong(tmp_path, content, message):
    (tmp_path / "state.json").write_bytes(content)
    with pytest.raises(GateLoadError, match=message):
        read_json_file(tmp_path, "state.json")


def test_read_json_file_of_a_missing_name(tmp_path):
    with pytest.raises(GateLoadError, match=r"missing state\.json"):
        read_json_file(tmp_path, "state.json")


def test_saving_over_what_is_there(tmp_path):
    gate = tmp_path / "gate"
    _save(gate)
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        _save(gate, threshold=0.7)
    _save(gate, threshold=0.7, overwrite=True)
    assert read_config(gate)["threshold"] == 0.7
    (gate / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"holds files that are not part of the saved gate \(notes\.txt\)"):
        check_save_target(gate, overwrite=True)


def test_only_a_saved_gate_or_an_empty_folder_is_overwritten(tmp_path):
    check_save_target(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_save_target(tmp_path / "empty", overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is not a directory"):
        check_save_target(tmp_path / "file", overwrite=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / CONFIG_FILE).write_text('{"format": "something else", "files": {}}')
    with pytest.raises(FileExistsError, match="is not a saved gate"):
        check_save_target(tmp_path / "other", overwrite=True)
    assert (tmp_path / "other" / CONFIG_FILE).exists()


def test_config_field_checks_presence_and_type():
    config = {"k": 3, "flag": True, "name": "x"}
    assert config_field(config, "k", int) == 3
    assert config_field(config, "flag", bool) is True
    assert config_field(config, "k", (int, float)) == 3
    with pytest.raises(GateLoadError, match=r"field 'state\.missing' is missing"):
        config_field(config, "missing", int, within="state")
    with pytest.raises(GateLoadError, match=r"field 'name' has the wrong type \(str\)"):
        config_field(config, "name", int)
    with pytest.raises(GateLoadError, match=r"field 'flag' has the wrong type \(bool\)"):
        config_field(config, "flag", int)  # a bool is no count


def test_check_saved_backend(tmp_path):
    check_saved_backend(tmp_path, "model", "mini", "mini", "embedder")
    with pytest.raises(GateLoadError, match="field 'model' is 'a' but the given embedder is 'b'; the vectors differ"):
        check_saved_backend(tmp_path, "model", "a", "b", "embedder", why="the vectors differ")
    with pytest.raises(GateLoadError, match="saved with embedder 'a'; pass embedder= with that model"):
        check_saved_backend(tmp_path, "model", "a", "b", "embedder", pass_argument="embedder")


def test_library_versions_name_the_package_and_numpy():
    versions = library_versions()
    assert versions["numpy"] == np.__version__
    assert "adaptive-gates" in versions


def _raw_npy(path, header, data=b""):
    with path.open("wb") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        fh.write(data)


def test_load_array_refuses_objects_and_lying_headers(tmp_path):
    _raw_npy(tmp_path / "objects.npy", {"descr": "|O", "fortran_order": False, "shape": (2,)}, b"\0" * 16)
    with pytest.raises(GateLoadError, match="holds object values; expected a plain array"):
        load_array(tmp_path, "objects.npy")
    _raw_npy(tmp_path / "huge.npy", {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}, b"\0" * 8)
    with pytest.raises(GateLoadError, match="but has 8 bytes of data"):
        load_array(tmp_path, "huge.npy")
    (tmp_path / "text.npy").write_bytes(b"not an array at all")
    with pytest.raises(GateLoadError, match=r"not a \.npy array"):
        load_array(tmp_path, "text.npy")
    save_array(tmp_path, "ints.npy", np.arange(3))
    with pytest.raises(GateLoadError, match="expected a plain array of kind 'f'"):
        load_array(tmp_path, "ints.npy", kinds="f")
    with pytest.raises(GateLoadError, match="has shape \\(3,\\); expected 2 dimension"):
        load_array(tmp_path, "ints.npy", ndim=2)
    with pytest.raises(GateLoadError, match="is not readable"):
        load_array(tmp_path, "absent.npy")


def test_load_array_keeps_fortran_order(tmp_path):
    array = np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3))
    np.save(tmp_path / "f.npy", array, allow_pickle=False)
    np.testing.assert_array_equal(load_array(tmp_path, "f.npy"), array)

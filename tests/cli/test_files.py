"""The command's files, tried as the arguments are parsed."""

from __future__ import annotations

import argparse
import json

import pytest

from adaptive_gates.bundled.datasets import ADARAGUE_TASKS, adarague_path
from adaptive_gates.bundled.shipped import pretrained_path
from adaptive_gates.cli import main
from adaptive_gates.cli.files import (
    FILE_ROLES,
    bundled_help,
    data_file,
    gate_directory,
    input_file,
    output_file,
    plot_file,
    report_file,
    saved_gate,
    write_report,
    written_output,
)
from support.immutable import immutable


def test_inputs_must_exist(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("{}\n")
    assert input_file(str(path)) == path
    with pytest.raises(argparse.ArgumentTypeError, match=r"no such file"):
        input_file(str(tmp_path / "missing.jsonl"))
    with pytest.raises(argparse.ArgumentTypeError, match=r"no such file"):
        input_file(str(tmp_path))


def test_outputs_are_tried_before_the_work(tmp_path):
    assert output_file(str(tmp_path / "new" / "out.jsonl")) == tmp_path / "new" / "out.jsonl"
    with pytest.raises(argparse.ArgumentTypeError, match=r"is a directory, not a file"):
        output_file(str(tmp_path))
    assert report_file(str(tmp_path / "report.json")) == tmp_path / "report.json"
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder would be")
    with pytest.raises(argparse.ArgumentTypeError, match=r"blocker"):
        report_file(str(blocker / "report.json"))
    with pytest.raises(argparse.ArgumentTypeError, match=r"blocker"):
        gate_directory(str(blocker / "gate"))
    assert gate_directory(str(tmp_path / "gates" / "g")) == tmp_path / "gates" / "g"


def test_a_read_only_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    with immutable(locked), pytest.raises(argparse.ArgumentTypeError, match=r"locked"):
        report_file(str(locked / "report.json"))


def test_plots_need_a_format_suffix(tmp_path):
    assert plot_file(str(tmp_path / "p.png")) == tmp_path / "p.png"
    with pytest.raises(argparse.ArgumentTypeError, match=r"not a plot format"):
        plot_file(str(tmp_path / "p"))


def test_saved_gates_and_pretrained_names(tmp_path):
    assert saved_gate("pretrained:draft-check") == pretrained_path("draft-check")
    assert saved_gate(str(tmp_path)) == tmp_path
    with pytest.raises(argparse.ArgumentTypeError, match=r"no pretrained gate 'nope'"):
        saved_gate("pretrained:nope")


def test_data_files_and_bundled_names(tmp_path):
    records = tmp_path / "records.jsonl"
    records.write_text("")
    assert data_file(str(records)) == records
    for task in ADARAGUE_TASKS:
        assert data_file(f"bundled:{task}") == adarague_path(task)
    with pytest.raises(argparse.ArgumentTypeError, match=r"no such file: bundled.jsonl"):
        data_file("bundled.jsonl")  # a path that only starts like a name
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        data_file("bundled:natural-questions")
    names = ", ".join(f"bundled:{task}" for task in ADARAGUE_TASKS)
    assert str(refused.value) == f"no bundled data set 'bundled:natural-questions'; the package ships {names}"
    assert bundled_help().endswith(names)


def test_every_file_type_has_a_role():
    assert FILE_ROLES[input_file] == FILE_ROLES[saved_gate] == "input"
    assert FILE_ROLES[report_file] == FILE_ROLES[plot_file] == FILE_ROLES[output_file] == "output"
    assert FILE_ROLES[gate_directory] == "directory"


def test_reports_are_written_whole_and_failures_name_the_flag(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old")
    write_report("--json", path, '{"n": 1}')
    assert json.loads(path.read_text()) == {"n": 1}
    with pytest.raises(OSError, match=r"--json .*: cannot write \(disk full\)"), written_output("--json", path):
        raise OSError(28, "disk full")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder would be")
    with pytest.raises(OSError, match=r"--plot .*blocker/r.json: cannot write"):
        write_report("--plot", blocker / "r.json", "{}")


def test_the_command_refuses_a_missing_input_before_any_work(capsys, no_work, tmp_path):
    status = main(
        [
            "eval",
            "--gate",
            "bm25-difficulty",
            "--test",
            str(tmp_path / "absent.jsonl"),
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    assert status == 2
    assert "no such file" in capsys.readouterr().err

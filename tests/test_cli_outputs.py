"""The ``adaptive-gates`` command refuses what it could not finish before any work: an
output it cannot write (tried for real: as root, ``os.access`` says yes even in an
immutable folder), a plot format matplotlib does not write, a base URL that is not one.
Each is one ``adaptive-gates: error: ...`` line and exit status 2, and nothing is loaded,
answered or written; a write that fails at the end anyway is reported the same way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from adaptive_gates.cli import main
from adaptive_gates.data import write_jsonl
from adaptive_gates.datasets import adarague_path
from adaptive_gates.persistence.writable import check_creatable, check_writable

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PREFIX = "adaptive-gates: error: "
REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "adaptive-gates"
NQ = str(adarague_path("nq"))  # outcome records, which are QA records too


def _chattr(flag: str, path: Path) -> bool:
    """Set or clear an attribute with ``chattr``; False where the tool or filesystem lacks it."""
    chattr = shutil.which("chattr")
    return chattr is not None and subprocess.run([chattr, flag, str(path)], capture_output=True).returncode == 0


@pytest.fixture
def locked(tmp_path) -> Iterator[Path]:
    """A folder nothing can be created in, root included: immutable (``chattr +i``), or,
    on a filesystem without that flag, a regular file where the folder would be."""
    folder = tmp_path / "locked"
    folder.mkdir()
    if not _chattr("+i", folder):
        folder.rmdir()
        folder.write_text("a file, not a folder\n")
        yield folder
        return
    try:
        yield folder
    finally:
        _chattr("-i", folder)  # or pytest cannot remove tmp_path


@pytest.fixture
def tiny(tmp_path) -> dict[str, Path]:
    """Two QA records and a corpus of two passages, written in ``tmp_path``."""
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    write_jsonl(
        qa,
        [
            {"id": "q1", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"]},
            {"id": "q2", "question": "What is the capital of France?", "answers": ["Paris"]},
        ],
    )
    write_jsonl(
        corpus,
        [
            {"id": "p1", "title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."},
            {"id": "p2", "title": "Paris", "text": "Paris is the capital of France."},
        ],
    )
    return {"qa": qa, "corpus": corpus}


def _error_line(err: str) -> str:
    """The one line of ``err``, which must be an ``adaptive-gates: error:`` line."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), err
    return lines[0]


def _script_env() -> dict[str, str]:
    """The environment for the console script: it imports this checkout's package."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


EVAL = ["eval", "--gate", "skr-knn", "--train", NQ, "--test", NQ]
SEAKR = ["seakr", "--test", "{qa}", "--corpus", "{corpus}", "--mode", "simple"]


@pytest.mark.parametrize(
    "argv, flag, output",
    [
        ([*EVAL, "--json", "{locked}/r.json"], "--json", "{locked}/r.json"),
        ([*EVAL, "--json", "{tmp}/r.json", "--plot", "{locked}/plots/r.png"], "--plot", "{locked}/plots/r.png"),
        (["fit", "--gate", "skr-knn", "--train", NQ, "--out", "{locked}/gate"], "--out", "{locked}/gate"),
        (["collect", "--qa", "{qa}", "--corpus", "{corpus}", "--out", "{locked}/o.jsonl"], "--out", "{locked}/o.jsonl"),
        ([*SEAKR, "--json", "{locked}/s.json"], "--json", "{locked}/s.json"),
        ([*SEAKR, "--json", "{tmp}/s.json", "--checkpoint", "{locked}/c.jsonl"], "--checkpoint", "{locked}/c.jsonl"),
    ],
)
def test_an_output_in_a_folder_that_cannot_be_written_is_refused_before_any_work(
    locked, tiny, tmp_path, capsys, no_work, argv, flag, output
):
    places = {"locked": locked, "tmp": tmp_path, **tiny}
    before = sorted(tmp_path.iterdir())
    assert main([a.format(**places) for a in argv]) == 2
    captured = capsys.readouterr()
    line = _error_line(captured.err)
    assert line.startswith(f"{PREFIX}argument {flag}: {output.format(**places)}: cannot write in {locked} (")
    assert captured.out == ""
    assert sorted(tmp_path.iterdir()) == before  # nothing written, no probe left behind
    if locked.is_dir():
        assert not any(locked.iterdir())


def test_an_output_file_that_cannot_be_appended_to_is_refused(tiny, tmp_path, capsys, no_work):
    out = tmp_path / "outcomes.jsonl"
    out.write_text('{"id": "q1"}\n')
    if not _chattr("+i", out):
        pytest.skip("chattr +i is not available on this filesystem")
    try:
        assert main(["collect", "--qa", str(tiny["qa"]), "--corpus", str(tiny["corpus"]), "--out", str(out)]) == 2
    finally:
        _chattr("-i", out)
    line = _error_line(capsys.readouterr().err)
    assert line == f"{PREFIX}argument --out: {out}: cannot write to {out} (Operation not permitted)"
    assert out.read_text() == '{"id": "q1"}\n'


def test_collect_into_a_locked_folder_asks_the_server_nothing(openai_server, openai_base_url, tiny, locked):
    out = locked / "outcomes.jsonl"
    failed = subprocess.run(
        [
            str(SCRIPT),
            "collect",
            "--qa",
            str(tiny["qa"]),
            "--corpus",
            str(tiny["corpus"]),
            "--out",
            str(out),
            "--chat-model",
            openai_server.model_id,
            "--base-url",
            openai_base_url,
            "--limit",
            "1",
        ],
        env=_script_env(),
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 2 and failed.stdout == "", failed.stderr
    assert _error_line(failed.stderr).startswith(f"{PREFIX}argument --out: {out}: cannot write in {locked} (")
    assert openai_server.requests == 0


@pytest.mark.parametrize("plot", ["r.xyz", "r"])
def test_a_plot_format_matplotlib_does_not_write_is_refused_before_the_report(tmp_path, capsys, no_work, plot):
    report = tmp_path / "r.json"
    assert main([*EVAL, "--json", str(report), "--plot", str(tmp_path / plot)]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(
        f"{PREFIX}argument --plot: {tmp_path / plot}: not a plot format matplotlib writes; end the file name in one of "
    )
    assert ".png" in line and ".pdf" in line and ".svg" in line
    assert not report.exists()


@pytest.mark.skipif(shutil.which("xelatex") is not None, reason="xelatex is installed: .pgf plots can be written")
def test_a_pgf_plot_without_its_tex_program_is_refused_before_the_report(tmp_path, capsys, no_work):
    report, plot = tmp_path / "r.json", tmp_path / "r.pgf"
    assert main([*EVAL, "--json", str(report), "--plot", str(plot)]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line == f"{PREFIX}argument --plot: {plot}: matplotlib writes .pgf with xelatex, which is not installed"
    assert not report.exists()


@pytest.mark.parametrize(
    "argv",
    [
        [
            "eval",
            "--live",
            "--gate",
            "verbalized",
            "--test",
            "{qa}",
            "--corpus",
            "{corpus}",
            "--json",
            "{tmp}/r.json",
            "--chat-model",
            "m",
        ],
        ["eval", "--gate", "skr-prompt", "--train", NQ, "--test", NQ, "--json", "{tmp}/r.json", "--chat-model", "m"],
        ["collect", "--qa", "{qa}", "--corpus", "{corpus}", "--out", "{tmp}/o.jsonl", "--chat-model", "m"],
    ],
)
def test_a_base_url_that_is_not_one_is_refused_before_any_work(tiny, tmp_path, capsys, no_work, argv):
    places = {"tmp": tmp_path, **tiny}
    assert main([*(a.format(**places) for a in argv), "--base-url", "not a url"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line == (
        f"{PREFIX}argument --base-url: base URL 'not a url' is not an http(s) URL with a host, "
        "e.g. http://localhost:8000/v1"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "qa.jsonl"]


def test_fit_refuses_to_overwrite_what_is_not_a_gate_before_fitting(tmp_path, capsys, no_work):
    out = tmp_path / "notes.txt"
    out.write_text("mine\n")
    assert main(["fit", "--gate", "skr-knn", "--train", NQ, "--out", str(out), "--overwrite"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line == f"{PREFIX}--out {out} is not a directory (a file or link); refusing to overwrite it"
    assert out.read_text() == "mine\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full to stand for a full disk")
def test_a_write_that_fails_at_the_end_is_one_error_line(capsys):
    # /dev/full takes the open and refuses every write: a disk that filled up during the run.
    assert main(["eval", "--gate", "popularity", "--train", NQ, "--test", NQ, "--json", "/dev/full"]) == 2
    captured = capsys.readouterr()
    assert _error_line(captured.err) == f"{PREFIX}--json /dev/full: cannot write (No space left on device)"


def test_probes_leave_files_and_folders_as_they_were(tmp_path):
    existing = tmp_path / "report.json"
    existing.write_text("{}")
    stamp = existing.stat().st_mtime_ns
    check_writable(existing)
    assert existing.read_text() == "{}" and existing.stat().st_mtime_ns == stamp
    check_writable(tmp_path / "new" / "deeper" / "r.json")  # probed in tmp_path, where "new" would be made
    check_creatable(tmp_path / "gate")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    with pytest.raises(OSError, match=rf"^cannot write in {existing} \(Not a directory\)$"):
        check_writable(existing / "r.json")

"""The ``adaptive-gates`` command refuses what it could not finish before any work: an
output it cannot write (tried for real: as root, ``os.access`` says yes even in an
immutable folder), a plot format matplotlib does not write, a base URL that is not one.
Each is one ``adaptive-gates: error: ...`` line and exit status 2, and nothing is loaded,
answered or written; a write that fails at the end anyway is reported the same way."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from adaptive_gates.bundled.datasets import adarague_path
from adaptive_gates.cli import main
from adaptive_gates.persistence.writable import check_creatable, check_writable
from adaptive_gates.records.data import write_jsonl
from support.milvus_server import free_port

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PREFIX = "adaptive-gates: error: "
REPO = Path(__file__).resolve().parents[2]
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


EVAL = ["eval", "--gate", "skr-knn", "--train", NQ, "--test", str(adarague_path("trivia"))]
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


def test_collect_into_a_locked_folder_asks_the_server_nothing(
    openai_server, openai_base_url, tiny, locked, capsys, no_work
):
    out = locked / "outcomes.jsonl"
    argv = ["collect", "--qa", str(tiny["qa"]), "--corpus", str(tiny["corpus"]), "--out", str(out)]
    server = ["--chat-model", openai_server.model_id, "--base-url", openai_base_url, "--limit", "1"]
    assert main([*argv, *server]) == 2
    captured = capsys.readouterr()
    assert captured.out == "", captured.err
    assert _error_line(captured.err).startswith(f"{PREFIX}argument --out: {out}: cannot write in {locked} (")
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
        [
            "eval",
            "--gate",
            "skr-prompt",
            "--train",
            NQ,
            "--test",
            "bundled:trivia",
            "--json",
            "{tmp}/r.json",
            "--chat-model",
            "m",
        ],
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
    assert main(["eval", "--gate", "popularity", "--train", NQ, "--test", "bundled:trivia", "--json", "/dev/full"]) == 2
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


def _run(argv: list[str], file_size_limit: int | None = None, **kwargs) -> subprocess.CompletedProcess[str]:
    """The console script run on ``argv`` in a process of its own (whose files may grow
    to ``file_size_limit`` bytes, if given)."""
    command = [str(SCRIPT), *argv]
    if file_size_limit is not None:
        command = _with_file_size_limit(file_size_limit, command)
    return subprocess.run(command, env=_script_env(), capture_output=True, text=True, **kwargs)


@pytest.fixture
def inputs(tiny, tmp_path) -> dict[str, Path]:
    """``tiny``'s QA records and corpus, outcome records (a copy of NQ's), and a folder
    holding another copy of them, each a real file of ``tmp_path``."""
    outcomes = tmp_path / "nq.jsonl.gz"
    shutil.copyfile(NQ, outcomes)
    (tmp_path / "gate").mkdir()
    shutil.copyfile(NQ, tmp_path / "gate" / "train.jsonl.gz")
    return {**tiny, "outcomes": outcomes, "held": tmp_path / "gate" / "train.jsonl.gz"}


POPULAR = ["eval", "--gate", "popularity"]  # a gate fitted in a moment, with no model
SAME = "is the same file as"
INPUT = "an output may not overwrite an input"


@pytest.mark.parametrize(
    "argv, link, message",
    [
        # (command line, how the output is made to be the input, the error after PREFIX)
        (
            [*POPULAR, "--train", "{outcomes}", "--test", "{held}", "--json", "{tmp}/r.json"],
            ("hard", "{outcomes}", "r.json"),
            f"--json {{tmp}}/r.json {SAME} --train {{outcomes}}; {INPUT}",
        ),
        (
            [*POPULAR, "--train", "{outcomes}", "--test", "{held}", "--json", "{tmp}/r.json"],
            ("symbolic", "{held}", "r.json"),
            f"--json {{tmp}}/r.json {SAME} --test {{held}}; {INPUT}",
        ),
        (
            [
                *POPULAR,
                "--train",
                "{held}",
                "{outcomes}",
                "--test",
                "{held}",
                "--json",
                "{tmp}/r.json",
                "--plot",
                "{tmp}/p.png",
            ],
            ("hard", "{outcomes}", "p.png"),
            f"--plot {{tmp}}/p.png {SAME} --train {{outcomes}}; {INPUT}",
        ),
        (
            [*SEAKR, "--json", "{tmp}/s.json"],
            ("symbolic", "{qa}", "s.json"),
            f"--json {{tmp}}/s.json {SAME} --test {{qa}}; {INPUT}",
        ),
        (
            [*SEAKR, "--json", "{tmp}/s.json", "--checkpoint", "{tmp}/c.jsonl"],
            ("hard", "{corpus}", "c.jsonl"),
            f"--checkpoint {{tmp}}/c.jsonl {SAME} --corpus {{corpus}}; {INPUT}",
        ),
        (
            [*SEAKR, "--json", "{tmp}/s.json", "--checkpoint", "{tmp}/s.json"],
            None,
            f"--json {{tmp}}/s.json {SAME} --checkpoint {{tmp}}/s.json; give each output a file of its own",
        ),
        (
            ["collect", "--qa", "{qa}", "--corpus", "{corpus}", "--out", "{tmp}/o.jsonl"],
            ("symbolic", "{qa}", "o.jsonl"),
            f"--out {{tmp}}/o.jsonl {SAME} --qa {{qa}}; {INPUT}",
        ),
        (
            ["fit", "--gate", "popularity", "--train", "{outcomes}", "--out", "{tmp}/g", "--overwrite"],
            ("hard", "{outcomes}", "g"),
            f"--out {{tmp}}/g {SAME} --train {{outcomes}}; {INPUT}",
        ),
        (
            ["fit", "--gate", "popularity", "--train", "{held}", "--out", "{tmp}/gate", "--overwrite"],
            None,
            "--out {tmp}/gate would be replaced whole, and it holds --train {held}",
        ),
    ],
)
def test_an_output_that_is_an_input_is_refused_before_any_work(inputs, tmp_path, capsys, no_work, argv, link, message):
    places = {"tmp": tmp_path, **inputs}
    if link is not None:
        kind, target, name = link
        target = Path(target.format(**places))
        if kind == "hard":
            (tmp_path / name).hardlink_to(target)
        else:
            (tmp_path / name).symlink_to(target)
    contents = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main([a.format(**places) for a in argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "", captured.err
    assert _error_line(captured.err) == PREFIX + message.format(**places)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == contents  # nothing written


TWICE = "names the same file twice"
JUDGED = "the gate would be judged on the records it learnt from"


@pytest.mark.parametrize(
    "argv, link, message",
    [
        # (command line, a link made to an input, the error after PREFIX)
        (
            [*POPULAR, "--train", "{outcomes}", "{outcomes}", "--json", "{tmp}/r.json"],
            None,
            f"--train {TWICE} ({{outcomes}} and {{outcomes}}): its records would count twice; give each file once",
        ),
        (
            [
                "fit",
                "--gate",
                "popularity",
                "--train",
                "{held}",
                "{outcomes}",
                "{tmp}/link.jsonl.gz",
                "--out",
                "{tmp}/g",
            ],
            ("symbolic", "{outcomes}", "link.jsonl.gz"),
            f"--train {TWICE} ({{outcomes}} and {{tmp}}/link.jsonl.gz)",
        ),
        (
            [*POPULAR, "--train", "bundled:nq", NQ, "--json", "{tmp}/r.json"],
            None,
            f"--train {TWICE} ({NQ} and {NQ})",
        ),
        (
            [*POPULAR, "--train", "{held}", "{outcomes}", "--test", "{outcomes}", "--json", "{tmp}/r.json"],
            None,
            f"--test {{outcomes}} {SAME} --train {{outcomes}}: {JUDGED}; give held-out records to --test "
            "(or, for eval, leave --test out for a report cross-fitted on --train)",
        ),
        (
            [*POPULAR, "--train", "bundled:nq", "--test", NQ, "--json", "{tmp}/r.json"],
            None,
            f"--test {NQ} {SAME} --train {NQ}: {JUDGED}",
        ),
        (
            [*POPULAR, "--train", "{outcomes}", "--test", "{tmp}/hard.jsonl.gz", "--json", "{tmp}/r.json"],
            ("hard", "{outcomes}", "hard.jsonl.gz"),
            f"--test {{tmp}}/hard.jsonl.gz {SAME} --train {{outcomes}}: {JUDGED}",
        ),
        (
            [
                *POPULAR,
                "--live",
                "--train",
                "{outcomes}",
                "--test",
                "{outcomes}",
                "--corpus",
                "{corpus}",
                "--json",
                "{tmp}/r.json",
            ],
            None,
            f"--test {{outcomes}} {SAME} --train {{outcomes}}: {JUDGED}",
        ),
        (
            [*SEAKR, "--mode", "multihop", "--target-rate", "0.3", "--train", "{qa}", "--json", "{tmp}/s.json"],
            None,
            f"--test {{qa}} {SAME} --train {{qa}}: {JUDGED}",
        ),
    ],
    ids=[
        "train-twice",
        "train-link",
        "train-bundled",
        "test-in-train",
        "test-bundled",
        "test-hard-link",
        "live",
        "seakr",
    ],
)
def test_an_input_read_twice_or_a_test_among_the_training_files_is_refused(
    inputs, tmp_path, capsys, no_work, argv, link, message
):
    places = {"tmp": tmp_path, **inputs}
    if link is not None:
        kind, target, name = link
        target = Path(target.format(**places))
        if kind == "hard":
            (tmp_path / name).hardlink_to(target)
        else:
            (tmp_path / name).symlink_to(target)
    assert main([a.format(**places) for a in argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "", captured.err
    assert _error_line(captured.err).startswith(PREFIX + message.format(**places))
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "g").exists()


def _with_file_size_limit(limit: int, argv: list[str]) -> list[str]:
    """``argv`` run in a process whose files may grow to ``limit`` bytes: a write past it
    fails with EFBIG ("File too large"), as on a full disk, once SIGXFSZ (which would
    kill the process) is ignored. A small Python sets both and execs the command, which
    keeps them; setting them between fork and exec (``preexec_fn``) aborts the child when
    the test's process has loaded gRPC (the Milvus tests do), whose fork handler fails."""
    setup = (
        "import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", setup, *argv]


@pytest.mark.parametrize(
    "outputs, flag, limit",
    [
        # The report is ~39 kB and the plot ~64 kB: each limit lets the one before it through.
        (["--json", "{tmp}/r.json"], "--json", 8_000),
        (["--json", "{tmp}/r.json", "--plot", "{tmp}/p.png"], "--plot", 50_000),
    ],
)
def test_a_write_that_fails_at_the_end_leaves_the_old_file(tmp_path, outputs, flag, limit):
    old = {"--json": tmp_path / "r.json", "--plot": tmp_path / "p.png"}
    for path in old.values():
        path.write_bytes(b"the run before\n")
    argv = ["eval", "--gate", "popularity", "--train", NQ, "--test", "bundled:trivia"]
    failed = _run([*argv, *(o.format(tmp=tmp_path) for o in outputs)], file_size_limit=limit)
    assert failed.returncode == 2, failed.stderr
    assert _error_line(failed.stderr) == f"{PREFIX}{flag} {old[flag]}: cannot write (File too large)"
    assert old[flag].read_bytes() == b"the run before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.png", "r.json"]  # no temporary file left


@pytest.mark.parametrize(
    "port, says",
    [
        ("70000", "argument --port: must be a port number from 1 to 65535, got '70000'"),
        ("taken", "--host 127.0.0.1 --port {port}: cannot listen on 127.0.0.1 (Address already in use)"),
    ],
)
def test_serve_refuses_a_port_it_cannot_listen_on_before_loading_anything(tiny, port, says):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        if port == "taken":
            port = str(holder.getsockname()[1])
        failed = _run(["serve", "--corpus", str(tiny["corpus"]), "--port", port], timeout=120)
    assert failed.returncode == 2, failed.stderr
    # one line: nothing was loaded (serve says so before it loads)
    assert _error_line(failed.stderr) == PREFIX + says.format(port=port)


def test_serve_refuses_a_gate_folder_it_could_not_save_feedback_into_before_loading_anything(tiny, tmp_path):
    gate = tmp_path / "gate"
    assert main(["fit", "--gate", "popularity", "--train", NQ, "--out", str(gate)]) == 0
    corpus = gate / "corpus.jsonl"  # a file of the user's, which saving the gate would lose
    shutil.copyfile(tiny["corpus"], corpus)
    failed = _run(["serve", "--gate", str(gate), "--corpus", str(corpus), "--port", str(free_port())], timeout=120)
    assert failed.returncode == 2, failed.stderr
    assert _error_line(failed.stderr) == (
        f"{PREFIX}--gate {gate} holds files that are not part of the saved gate (corpus.jsonl); move them away "
        "before overwriting it, as feedback saves over it; or give --no-save"
    )

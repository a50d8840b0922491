"""A saved gate reads only its own directory, and a save never loses the gate that
was there: attacks on a copied gate refused naming the entry, saves killed at each
step recovered, concurrent saves serialised."""

import contextlib
import hashlib
import json
import multiprocessing
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from adaptive_gates import BudgetedGate, GateLoadError, PopularityGate, SKRKnnGate, load_gate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.persistence.saved_format import with_checksums
from support.immutable import immutable
from support.saved_layouts import flatten_members


@pytest.fixture(scope="module")
def outcomes():
    return adarague_outcomes("nq")[:60]


def _popularity(outcomes, rule="min"):
    """A popularity gate with array files: word counts of its own corpus (the questions)."""
    return PopularityGate(rule=rule).fit([r.question for r in outcomes]).fit_outcomes(outcomes)


def _edit_config(path, edit):
    """Edit config.json and recompute its checksums, as an attacker would."""
    config = json.loads((path / "config.json").read_text())
    edit(config)
    (path / "config.json").write_text(json.dumps(with_checksums(config)))


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ------------------------------------------------------------ reading only inside


def _budget_with_member_at(outcomes, tmp_path, prefix_of):
    """A budget gate saved flat (as before members had folders) whose wrapped gate's
    prefix is ``prefix_of(tmp_path)``, with the member's files planted where that prefix
    points."""
    path = flatten_members(BudgetedGate(_popularity(outcomes), target_rate=0.5).save(tmp_path / "g"))
    config = json.loads((path / "config.json").read_text())
    assert config["state"]["gate"]["config"]["files"]  # the member has files to plant
    prefix = prefix_of(tmp_path)
    for name in config["state"]["gate"]["config"]["files"]:
        target = path / f"{prefix}.{name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path / f"gate.{name}", target)
    _edit_config(path, lambda c: c["state"]["gate"].update(prefix=prefix))
    return path, prefix


@pytest.mark.parametrize(
    "prefix_of", [lambda tmp: "../outside", lambda tmp: str(tmp / "elsewhere" / "member")], ids=["climbing", "absolute"]
)
def test_member_prefix_outside_the_directory_is_refused(outcomes, tmp_path, prefix_of):
    path, prefix = _budget_with_member_at(outcomes, tmp_path, prefix_of)
    with pytest.raises(GateLoadError) as info:
        load_gate(path)
    assert "state.wrapped gate.prefix" in str(info.value) and repr(prefix) in str(info.value)


@pytest.mark.parametrize(
    "folder_of", [lambda tmp: "../outside", lambda tmp: str(tmp / "elsewhere" / "member")], ids=["climbing", "absolute"]
)
def test_member_folder_outside_the_directory_is_refused(outcomes, tmp_path, folder_of):
    path = BudgetedGate(_popularity(outcomes), target_rate=0.5).save(tmp_path / "g")
    folder = folder_of(tmp_path)
    shutil.copytree(path / "gate", path / folder)  # a valid member where the name points
    _edit_config(path, lambda c: c["state"]["gate"].update(folder=folder))
    with pytest.raises(GateLoadError) as info:
        load_gate(path)
    assert "state.wrapped gate.folder" in str(info.value) and repr(folder) in str(info.value)


def test_folders_entry_outside_the_directory_is_refused(outcomes, tmp_path):
    path = BudgetedGate(_popularity(outcomes), target_rate=0.5).save(tmp_path / "gates" / "g")
    shutil.copytree(path / "gate", tmp_path / "other")
    digest = _sha256(tmp_path / "other" / "config.json")
    _edit_config(path, lambda c: c["folders"].update({"../../other": digest}))
    with pytest.raises(GateLoadError, match=r"field 'folders' is '\.\./\.\./other'"):
        load_gate(path)


def test_member_folder_replaced_by_a_link_is_refused(outcomes, tmp_path):
    path = BudgetedGate(_popularity(outcomes), target_rate=0.5).save(tmp_path / "g")
    (path / "gate").rename(tmp_path / "member-elsewhere")  # the same files: every checksum matches
    (path / "gate").symlink_to(tmp_path / "member-elsewhere", target_is_directory=True)
    with pytest.raises(GateLoadError, match=r"holds symbolic links \(gate\)"):
        load_gate(path)


def test_file_in_a_member_folder_replaced_by_a_link_is_refused(outcomes, tmp_path):
    path = BudgetedGate(_popularity(outcomes), target_rate=0.5).save(tmp_path / "g")
    counts = path / "gate" / "counts.npy"
    shutil.copyfile(counts, tmp_path / "counts-elsewhere.npy")
    counts.unlink()
    counts.symlink_to(tmp_path / "counts-elsewhere.npy")
    with pytest.raises(
        GateLoadError, match=r"wrapped gate cannot be loaded: .*/gate: holds symbolic links \(counts\.npy\)"
    ):
        load_gate(path)


@pytest.mark.parametrize("where", ["climbing", "absolute"])
def test_files_entry_outside_the_directory_is_refused(outcomes, tmp_path, where):
    path = _popularity(outcomes).save(tmp_path / "gates" / "g")
    outside = tmp_path / "other" / "labels.npy"
    outside.parent.mkdir()
    outside.write_bytes(b"not part of the gate")
    name = "../../other/labels.npy" if where == "climbing" else str(outside)
    _edit_config(path, lambda c: c["files"].update({name: _sha256(outside)}))
    with pytest.raises(GateLoadError) as info:
        load_gate(path)
    assert "field 'files'" in str(info.value) and repr(name) in str(info.value)


def test_files_entry_naming_a_system_file_is_refused(outcomes, tmp_path):
    path = _popularity(outcomes).save(tmp_path / "g")
    _edit_config(path, lambda c: c["files"].update({"/etc/hostname": _sha256("/etc/hostname")}))
    with pytest.raises(GateLoadError, match=r"field 'files' is '/etc/hostname'"):
        load_gate(path)


def test_file_replaced_by_a_link_is_refused(outcomes, tmp_path):
    path = _popularity(outcomes).save(tmp_path / "g")
    outside = tmp_path / "counts-elsewhere.npy"
    shutil.copyfile(path / "counts.npy", outside)  # same bytes: the checksum still matches
    (path / "counts.npy").unlink()
    (path / "counts.npy").symlink_to(outside)
    with pytest.raises(GateLoadError, match=r"symbolic link.*counts\.npy|counts\.npy.*symbolic link"):
        load_gate(path)


def test_gate_directory_itself_may_be_a_link(outcomes, tmp_path):
    gate = _popularity(outcomes)
    gate.save(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    assert load_gate(tmp_path / "link").threshold_ == gate.threshold_


@pytest.fixture(scope="module")
def knn(embedder, outcomes):
    questions = [r.question for r in outcomes[:24]]
    return SKRKnnGate(embedder, k=3).fit(questions, [i % 2 for i in range(24)])


def test_backend_saved_as_a_parameter_is_refused(knn, tmp_path):
    path = knn.save(tmp_path / "g")
    _edit_config(path, lambda c: c["params"].update(embedder="all-MiniLM-L6-v2"))
    with pytest.raises(GateLoadError, match=r"field 'params\.embedder' is 'all-MiniLM-L6-v2'"):
        SKRKnnGate.load(path)


def test_malformed_memory_size_is_refused_naming_it(knn, embedder, tmp_path):
    path = knn.save(tmp_path / "g")
    _edit_config(path, lambda c: c["state"].update(size=[24]))
    with pytest.raises(GateLoadError, match=r"field 'state\.size' has the wrong type \(list\)"):
        SKRKnnGate.load(path, embedder=embedder)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["params"].update(rule="loudest"), r"field 'params'.*loudest"),
        (lambda c: c["params"].update(fallback_retrieve="yes"), r"field 'params'.*fallback_retrieve.*'yes'"),
        (lambda c: c.update(calibration="x"), r"field 'calibration' has the wrong type"),
        (lambda c: c["calibration"].update(score_sample="x"), r"field 'calibration' is malformed"),
    ],
    ids=["rule", "fallback_retrieve", "calibration", "calibration.score_sample"],
)
def test_malformed_field_is_refused_naming_it(outcomes, tmp_path, edit, message):
    path = _popularity(outcomes).calibrate([r.question for r in outcomes], target_rate=0.5).save(tmp_path / "g")
    _edit_config(path, edit)
    with pytest.raises(GateLoadError, match=message):
        load_gate(path)


# ------------------------------------------------------------ never losing a gate

#: Saves the gate of rule sys.argv[2] over sys.argv[1] (overwrite=True), SIGKILLing
#: itself at the call number sys.argv[4] of sys.argv[3] ("replace" or "rmtree"),
#: before it runs ("before") or after ("after", sys.argv[5]).
_KILLED_SAVE = textwrap.dedent(
    """
    import os, shutil, signal, sys
    from adaptive_gates import PopularityGate
    from adaptive_gates.bundled.datasets import adarague_outcomes

    path, rule, function, number, when = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    records = adarague_outcomes("nq")[:60]
    gate = PopularityGate(rule=rule).fit([r.question for r in records]).fit_outcomes(records)
    module = os if function == "replace" else shutil
    real, calls = getattr(module, function), []

    def killing(*args, **kwargs):
        calls.append(args)
        if len(calls) == number and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = real(*args, **kwargs)
        if len(calls) == number:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(module, function, killing)
    gate.save(path, overwrite=True)
    sys.exit(3)  # never reached: the kill comes first
    """
)


def _run(script, *args):
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, timeout=300)


def _hidden(parent):
    """The hidden folders next to a gate (a killed save's lock file is no folder and harmless)."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".") and p.is_dir())


@pytest.mark.parametrize(
    "function, number, when, expected",
    [
        ("replace", 1, "before", "min"),  # temporary folder complete, old gate in place
        ("replace", 1, "after", "min"),  # path missing: old gate only in the hidden old folder
        ("replace", 2, "before", "min"),  # same state, the second rename not started
        ("replace", 2, "after", "mean"),  # new gate in place, old folder left
        ("rmtree", 1, "before", "mean"),  # killed removing the old folder
    ],
)
def test_killed_save_leaves_the_old_or_the_new_gate(outcomes, tmp_path, function, number, when, expected):
    path = tmp_path / "g"
    _popularity(outcomes, "min").save(path)
    done = _run(_KILLED_SAVE, path, "mean", function, number, when)
    assert done.returncode == -9, done.stderr
    assert _hidden(tmp_path), "the kill left no hidden folder: it came too late to test anything"
    assert load_gate(path).rule == expected
    # The next save cleans up every leftover and replaces the gate.
    _popularity(outcomes, "total").save(path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]
    assert load_gate(path).rule == "total"


def test_next_save_recovers_the_gate_moved_aside(outcomes, tmp_path):
    path = tmp_path / "g"
    _popularity(outcomes, "min").save(path)
    assert _run(_KILLED_SAVE, path, "mean", "replace", 1, "after").returncode == -9
    assert not path.exists()  # the state the recovery exists for
    # Saving without overwrite finds the recovered gate there and refuses to replace it.
    with pytest.raises(FileExistsError):
        _popularity(outcomes, "total").save(path)
    assert load_gate(path).rule == "min"


#: Saves the gate of rule sys.argv[2] over sys.argv[1] twenty times (overwrite=True),
#: starting once the file sys.argv[3] exists, so that the processes' saves overlap.
_REPEATED_SAVES = textwrap.dedent(
    """
    import os, sys, time
    from adaptive_gates import PopularityGate
    from adaptive_gates.bundled.datasets import adarague_outcomes

    records = adarague_outcomes("nq")[:60]
    gate = PopularityGate(rule=sys.argv[2]).fit([r.question for r in records]).fit_outcomes(records)
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.01)
    for _ in range(20):
        gate.save(sys.argv[1], overwrite=True)
    """
)


def test_concurrent_saves_into_one_path_all_succeed(outcomes, tmp_path):
    path = tmp_path / "g"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    go = tmp_path.parent / f"{tmp_path.name}-go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _REPEATED_SAVES, str(path), rule, str(go)],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rule in ("min", "mean")
    ]
    go.touch()
    errors = [p.communicate(timeout=300)[1] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], errors
    assert load_gate(path).rule in {"min", "mean"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]  # no lock file, temporary or old folder left


#: Saves the gate of rule sys.argv[2] over sys.argv[1] (overwrite=True); with a
#: sys.argv[3], stops after its first rename (the old gate moved aside) until that
#: file exists, having created the file sys.argv[3] + "-paused".
_PAUSABLE_SAVE = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from adaptive_gates import PopularityGate
    from adaptive_gates.bundled.datasets import adarague_outcomes

    records = adarague_outcomes("nq")[:60]
    gate = PopularityGate(rule=sys.argv[2]).fit([r.question for r in records]).fit_outcomes(records)
    if len(sys.argv) > 3:
        resume, real, calls = Path(sys.argv[3]), os.replace, []

        def pausing(*args, **kwargs):
            real(*args, **kwargs)
            calls.append(args)
            if len(calls) == 1:
                Path(f"{resume}-paused").touch()
                while not resume.exists():
                    time.sleep(0.01)

        os.replace = pausing
    Path(f"{sys.argv[1]}-started-{sys.argv[2]}").touch()
    gate.save(sys.argv[1], overwrite=True)
    """
)


def test_save_into_a_path_another_save_is_swapping_waits_for_it(outcomes, tmp_path):
    """The interleaving that broke concurrent saves, reproduced step by step: one
    save stops between its two renames (the path missing), another save starts."""
    work = tmp_path.parent / f"{tmp_path.name}-signals"
    work.mkdir()
    path, resume = tmp_path / "g", work / "resume"
    _popularity(outcomes, "min").save(path)
    first = subprocess.Popen(
        [sys.executable, "-c", _PAUSABLE_SAVE, str(path), "mean", str(resume)], stderr=subprocess.PIPE, text=True
    )
    while not Path(f"{resume}-paused").exists():
        assert first.poll() is None, first.communicate()[1]
        time.sleep(0.05)
    assert not path.exists()  # the first save is between its renames
    second = subprocess.Popen(
        [sys.executable, "-c", _PAUSABLE_SAVE, str(path), "total"], stderr=subprocess.PIPE, text=True
    )
    while not (tmp_path / "g-started-total").exists():
        assert second.poll() is None, second.communicate()[1]
        time.sleep(0.05)
    # give the second save the time to run into the first (it waits for the lock)
    with contextlib.suppress(subprocess.TimeoutExpired):
        second.wait(timeout=5)
    resume.touch()
    errors = [p.communicate(timeout=300)[1] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], errors
    assert load_gate(path).rule == "total"  # the second save came last


#: Loads the gate at sys.argv[1], stopping once its config.json is read and verified
#: (having created sys.argv[2] + "-paused") until the file sys.argv[2] exists; prints
#: the loaded gate's rule and corpus size.
_PAUSABLE_LOAD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import adaptive_gates.gates.base.saved as saved
    from adaptive_gates import load_gate

    resume, real = Path(sys.argv[2]), saved.read_config

    def pausing(path):
        config = real(path)
        Path(f"{resume}-paused").touch()
        while not resume.exists():
            time.sleep(0.01)
        return config

    saved.read_config = pausing
    gate = load_gate(sys.argv[1])
    print(gate.rule, gate.rarity_.total)
    """
)

#: Saves a popularity gate of rule "mean" fitted on other questions over sys.argv[1].
_OTHER_SAVE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from adaptive_gates import PopularityGate
    from adaptive_gates.bundled.datasets import adarague_outcomes

    gate = PopularityGate(rule="mean").fit([r.question for r in adarague_outcomes("trivia")[:200]])
    Path(f"{sys.argv[1]}-saving").touch()
    gate.save(sys.argv[1], overwrite=True)
    """
)


def test_a_save_waits_for_a_load_reading_the_gate(outcomes, tmp_path):
    """A load stopped between verifying config.json and reading the files it lists,
    and a save of another gate into the same path meanwhile: the load gets the gate
    it verified, whole, and the save lands after it."""
    work = tmp_path.parent / f"{tmp_path.name}-signals"
    work.mkdir()
    path, resume = tmp_path / "g", work / "resume"
    saved = _popularity(outcomes, "min")
    saved.save(path)
    load = subprocess.Popen(
        [sys.executable, "-c", _PAUSABLE_LOAD, str(path), str(resume)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while not Path(f"{resume}-paused").exists():
        assert load.poll() is None, load.communicate()[1]
        time.sleep(0.05)
    save = subprocess.Popen([sys.executable, "-c", _OTHER_SAVE, str(path)], stderr=subprocess.PIPE, text=True)
    while not Path(f"{path}-saving").exists():
        assert save.poll() is None, save.communicate()[1]
        time.sleep(0.05)
    # give the save the time to run into the load (it waits for the lock)
    with contextlib.suppress(subprocess.TimeoutExpired):
        save.wait(timeout=3)
    resume.touch()
    printed, errors = load.communicate(timeout=300)
    assert load.returncode == 0, errors
    assert printed.split() == ["min", str(saved.rarity_.total)]
    assert save.wait(timeout=300) == 0, save.communicate()[1]
    assert load_gate(path).rule == "mean"
    assert _hidden(tmp_path) == [] and not (tmp_path / ".g.lock").exists()


def test_a_gate_moved_aside_in_a_read_only_folder_is_named(outcomes, tmp_path):
    """Recovery cannot move the gate back where nothing may be written: the load says
    where the gate is instead of raising PermissionError."""
    folder = tmp_path / "gates"
    path = _popularity(outcomes).save(folder / "g")
    aside = folder / ".g.old.interrupted"
    aside.mkdir()
    os.replace(path, aside / "g")  # as a save killed between its renames leaves it
    moved = rf"left the gate that was there in {aside / 'g'}.*move it to {path}"
    with immutable(folder), pytest.raises(GateLoadError, match=moved):
        load_gate(path)
    assert load_gate(path).rule == "min"  # writable again: recovered


def _save_with_a_file_size_limit(gate, path, limit, results):
    """In a forked process: save ``gate`` over ``path`` where a file may grow to ``limit``
    bytes only, so a longer write fails with EFBIG ("File too large") as on a full disk
    (SIGXFSZ, which would kill the process instead, ignored); send back what it raised."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        gate.save(path, overwrite=True)
    except BaseException as exc:
        results.send((type(exc).__name__, str(exc)))
    else:
        results.send(None)


def test_a_save_that_runs_out_of_space_names_the_gate_and_keeps_the_old_one(knn, tmp_path):
    path = knn.save(tmp_path / "g")
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    # The faiss index of 24 questions is ~37 kB; every other file of the gate is smaller than 4 kB.
    fork = multiprocessing.get_context("fork")
    receiving, sending = fork.Pipe(duplex=False)
    saver = fork.Process(target=_save_with_a_file_size_limit, args=(knn, path, 4096, sending))
    saver.start()
    raised = receiving.recv()
    saver.join()
    assert raised == ("OSError", f"cannot save to {path} (File too large)")
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]  # no temporary folder or lock file left
    assert SKRKnnGate.load(path, embedder=knn.embedder).decide_batch(["who wrote hamlet"])


# ------------------------------------------------------------ names planted beside a gate


def _snapshot(folder):
    """Every entry under ``folder`` (links not followed) with its kind, bytes and times:
    any file created, written or touched there changes it."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            entry = Path(root) / name
            info = entry.lstat()
            body = entry.read_bytes() if entry.is_file() and not entry.is_symlink() else None
            out[str(entry.relative_to(folder))] = (info.st_mode, info.st_mtime_ns, body)
    return out


def _plant_lock(kind, lock, outside):
    """Put at the lock's name what a stranger would: a link to a file outside, to a
    directory, to a file not there yet, a FIFO, or a file of another user."""
    if kind == "link to a file":
        lock.symlink_to(outside / "victim.txt")
    elif kind == "link to a directory":
        lock.symlink_to(outside, target_is_directory=True)
    elif kind == "dangling link":
        lock.symlink_to(outside / "created-by-the-load")
    elif kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.touch()
        os.chown(lock, 65534, 65534)  # nobody's


LOCK_PLANTS = ["link to a file", "link to a directory", "dangling link", "fifo", "another user's file"]


@pytest.fixture
def planted_beside(outcomes, tmp_path):
    """A saved gate in ``gates/`` and a folder ``outside`` with a file a link can point at."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("not the gate's")
    path = _popularity(outcomes).save(tmp_path / "gates" / "g")
    return path, outside


@pytest.mark.parametrize("kind", LOCK_PLANTS)
def test_load_refuses_a_lock_name_that_is_no_file_of_its_own(planted_beside, kind):
    path, outside = planted_beside
    lock = path.parent / ".g.lock"
    _plant_lock(kind, lock, outside)
    before = _snapshot(outside)
    with pytest.raises(GateLoadError, match=r"\.g\.lock: .*not a regular file of this user.*remove it"):
        load_gate(path)
    assert _snapshot(outside) == before
    assert lock.is_symlink() or lock.exists()  # left for the user to look at


@pytest.mark.parametrize("kind", LOCK_PLANTS)
def test_save_refuses_a_lock_name_that_is_no_file_of_its_own(planted_beside, outcomes, kind):
    path, outside = planted_beside
    _plant_lock(kind, path.parent / ".g.lock", outside)
    before = _snapshot(outside)
    with pytest.raises(FileExistsError, match=r"\.g\.lock: .*not a regular file of this user"):
        _popularity(outcomes, "mean").save(path, overwrite=True)
    assert _snapshot(outside) == before
    (path.parent / ".g.lock").unlink()
    assert load_gate(path).rule == "min"  # the gate that was there is untouched


@pytest.mark.parametrize("kind", ["tmp", "old"])
def test_links_at_temporary_and_old_names_are_neither_followed_nor_removed(planted_beside, outcomes, kind):
    path, outside = planted_beside
    planted = [path.parent / f".g.{kind}.planted", path.parent / f".g.{kind}.dangling"]
    planted[0].symlink_to(outside, target_is_directory=True)
    planted[1].symlink_to(outside / "not-there")
    before = _snapshot(outside)
    assert load_gate(path).rule == "min"
    _popularity(outcomes, "mean").save(path, overwrite=True)
    assert load_gate(path).rule == "mean"
    assert _snapshot(outside) == before
    assert all(p.is_symlink() for p in planted)  # only the save's own folders are removed


def test_a_link_in_an_old_folder_is_not_moved_back_as_the_gate(planted_beside, tmp_path):
    """A gate missing from its path, and a hidden old folder holding a link named like
    it: the recovery rule moves back only a real directory, never the link (which would
    make every load read the folder it points to)."""
    path, _ = planted_beside
    elsewhere = path.rename(tmp_path / "elsewhere")
    aside = path.parent / ".g.old.planted"
    aside.mkdir()
    (aside / "g").symlink_to(elsewhere, target_is_directory=True)
    for attempt in (load_gate, lambda p: _popularity(adarague_outcomes("nq")[:60]).save(p)):
        with contextlib.suppress(GateLoadError):
            attempt(path)
        assert not path.is_symlink()
    assert (aside / "g").is_symlink() or not aside.exists()

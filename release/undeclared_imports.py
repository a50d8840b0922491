"""List the imports of an installed distribution that its metadata does not declare.

Run with the Python of an environment the distribution is installed in (with every
extra, so each import resolves to the distribution that provides it):

    python undeclared_imports.py adaptive-gates [--allow NAME ...]

Every ``import x`` / ``from x import ...`` in the distribution's modules, at any depth
(a lazy import inside a function is a dependency too), must be the standard library, the
distribution itself, or provided by a distribution its ``Requires-Dist`` names
(in any extra). ``--allow`` names imports the documentation asks for by hand (the
packages that carry the embedded models' weights). Prints each undeclared import with
the modules that make it and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from importlib import metadata


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: Iterable[str]) -> set[str]:
    """The distributions requirement strings name, normalised (extras and markers dropped)."""
    names = set()
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match:
            names.add(_normalised(match.group(1)))
    return names


def imports_in(sources: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """Top-level names of the absolute imports in each ``(name, source)``, with the names."""
    found: dict[str, set[str]] = defaultdict(set)
    for name, source in sources:
        for node in ast.walk(ast.parse(source, filename=name)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                found[module.split(".")[0]].add(name)
    return found


def undeclared(imports: dict[str, set[str]], declared: set[str], allowed: Iterable[str] = ()) -> dict[str, set[str]]:
    """The imports no distribution in ``declared`` provides (per the installed ones), with
    their modules; the standard library and ``allowed`` names pass."""
    providers = metadata.packages_distributions()
    skipped = set(sys.stdlib_module_names) | set(allowed) | {"__future__"}
    missing = {}
    for name, files in imports.items():
        if name not in skipped and not {_normalised(d) for d in providers.get(name, [])} & declared:
            missing[name] = files
    return missing


def installed_sources(distribution: metadata.Distribution) -> list[tuple[str, str]]:
    """The installed modules of ``distribution`` as ``(path, source)``."""
    modules = [file for file in distribution.files or [] if file.suffix == ".py"]
    if not modules:  # an editable install lists no modules: nothing would be checked
        raise SystemExit(f"{distribution.metadata['Name']}: no installed modules to read (install the wheel)")
    return [(str(file), file.read_text(encoding="utf-8")) for file in modules]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("distribution")
    parser.add_argument("--allow", action="append", default=[], metavar="NAME", help="an import asked for by hand")
    args = parser.parse_args()
    distribution = metadata.distribution(args.distribution)
    declared = requirement_names(distribution.requires or []) | {_normalised(args.distribution)}
    missing = undeclared(imports_in(installed_sources(distribution)), declared, args.allow)
    for name, files in sorted(missing.items()):
        print(f"{args.distribution}: imports {name!r}, which no requirement provides: {', '.join(sorted(files))}")
    if not missing:
        print(f"{args.distribution}: every import is declared")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())

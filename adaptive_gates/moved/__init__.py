"""Old import paths of modules and names that moved, kept working for one release
(``paths``: the table of moves, the import hook and the package ``__getattr__`` helper)."""

from .paths import MODULES, NAMES, install, moved_attribute

__all__ = ["MODULES", "NAMES", "install", "moved_attribute"]

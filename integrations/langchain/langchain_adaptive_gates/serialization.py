"""Where LangChain's serialisation finds this package's classes.

``langchain_core.load.loads`` builds only the classes it is allowed to: give it
``valid_namespaces=["langchain_adaptive_gates"]`` and
``additional_import_mappings=IMPORT_MAPPINGS`` (the package's serialisable classes,
exported at the package's top level).
"""

from __future__ import annotations

from langchain_core.load.serializable import Serializable

#: LangChain's namespace of the package's serialisable classes (``lc_id`` reads it):
#: the package itself, so a class may move between modules without breaking saved JSON.
NAMESPACE = ["langchain_adaptive_gates"]


def import_mappings(*classes: type[Serializable]) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Each class's ``lc_id`` mapped to itself: ``loads`` then allows and imports it."""
    return {tuple(cls.lc_id()): tuple(cls.lc_id()) for cls in classes}


class InPackageNamespace:
    """The ``Serializable`` hooks every serialisable class of the package shares: it is
    serialisable, under ``NAMESPACE``. Listed before the LangChain base class."""

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return True

    @classmethod
    def get_lc_namespace(cls) -> list[str]:
        return NAMESPACE

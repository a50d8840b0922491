"""SKR's self-knowledge memory: labelled past questions, searchable by similarity.

``SKRMemory`` is the protocol the SKR gates need; ``FaissMemory`` (faiss, exact or
approximate: ``faiss_index``) and ``ExactMemory`` implement it here, and
``StoreBackedMemory`` is the base of the framework packages' memories over their
vector stores. ``adaptive_gates.milvus.memory.MilvusMemory`` keeps the memory in Milvus,
shared by processes.
"""

from ..moved import moved_attribute
from .faiss_index import IndexSettings
from .memories import ExactMemory, FaissMemory, RemovableMemory, SKRMemory, VerdictMemory
from .store_backed import StoreBackedMemory

__all__ = [
    "ExactMemory",
    "FaissMemory",
    "IndexSettings",
    "RemovableMemory",
    "SKRMemory",
    "StoreBackedMemory",
    "VerdictMemory",
]


def __getattr__(name: str) -> object:
    # Names this package handed on before they moved (one release of warnings).
    return moved_attribute(__name__, name)

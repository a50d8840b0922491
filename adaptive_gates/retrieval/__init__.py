"""Passage retrieval: lexical (BM25) and dense (faiss) retrievers (Milvus:
``adaptive_gates.milvus.retrieval``) behind one small protocol."""

from ..moved import moved_attribute
from .base import Hit, Retriever, passage_text
from .bm25 import BM25Retriever
from .cached import CachedRetriever
from .dense import DenseRetriever

__all__ = ["BM25Retriever", "CachedRetriever", "DenseRetriever", "Hit", "Retriever", "passage_text"]


def __getattr__(name: str) -> object:
    # Names this package handed on before they moved (one release of warnings).
    return moved_attribute(__name__, name)

"""Passage retrieval: lexical (BM25) and dense (faiss, or Milvus) retrievers behind one small protocol."""

from ..milvus.retrieval import MilvusRetriever
from .base import Hit, Retriever, passage_text
from .bm25 import BM25Retriever
from .cached import CachedRetriever
from .dense import DenseRetriever

__all__ = ["BM25Retriever", "CachedRetriever", "DenseRetriever", "Hit", "MilvusRetriever", "Retriever", "passage_text"]

"""Passage retrieval: lexical (BM25) and dense (faiss) retrievers behind one small protocol."""

from .base import Hit, Retriever, passage_text
from .bm25 import BM25Retriever
from .dense import DenseRetriever

__all__ = ["BM25Retriever", "DenseRetriever", "Hit", "Retriever", "passage_text"]

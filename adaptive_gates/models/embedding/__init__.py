"""Sentence embedders: the protocol's implementations over sentence-transformers, an ONNX
export (``onnx``), caching and adapters."""

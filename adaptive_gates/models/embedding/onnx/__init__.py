"""The MiniLM embedder run through ONNX Runtime: the export, its runner and the embedder."""

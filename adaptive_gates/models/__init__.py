"""Model backends: a local causal LM and a sentence embedder, plus the embedded defaults.

Importing this package is cheap; torch and transformers load on first model use.
"""

from .cache import cache_dir
from .defaults import default_embedder, default_llm, embedded_minilm_dir, embedded_smollm2_gguf
from .embedder import SentenceEmbedder
from .local_lm import Generation, LocalCausalLM, layer_module_path
from .protocols import Embedder

__all__ = [
    "Embedder",
    "Generation",
    "LocalCausalLM",
    "SentenceEmbedder",
    "cache_dir",
    "default_embedder",
    "default_llm",
    "embedded_minilm_dir",
    "embedded_smollm2_gguf",
    "layer_module_path",
]

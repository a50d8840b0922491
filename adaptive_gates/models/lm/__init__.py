"""The local causal LM: loading, generation, streaming, prefix caching and the hidden-state probe."""

"""An index over real paragraphs is built and searched with every socket refused: the
tokenizer comes from llama-index-core's own cache and the models are embedded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network use in an offline pipeline")

    socket.socket.connect = refuse
    socket.create_connection = refuse

    from adaptive_gates.bundled.datasets import packaged_corpus
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.utils import get_tokenizer
    from llama_index.embeddings.adaptive_gates import AdaptiveGatesEmbedding

    Settings.embed_model = AdaptiveGatesEmbedding()
    docs = [Document(text=r.text) for r in packaged_corpus("boolq")[:5]]
    index = VectorStoreIndex.from_documents(docs)
    hits = index.as_retriever(similarity_top_k=1).retrieve(docs[2].text[:200])
    assert hits[0].node.get_content() == docs[2].text, hits
    assert len(get_tokenizer()("a sentence of seven tokens or so")) > 0
    print("offline ok")
    """
)


def test_an_index_is_built_and_searched_without_the_network():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": ":".join(sys.path),
        },
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "offline ok" in done.stdout

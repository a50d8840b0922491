"""The text of a retrieved snippet, whatever framework made it."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from llama_index.core.schema import TextNode

from adaptive_gates.records.data import CorpusRecord, Hit
from adaptive_gates.seakr.snippets import snippet_text


def test_strings_and_framework_objects_give_their_text(wiki_paragraphs):
    paragraph = wiki_paragraphs[0]
    assert snippet_text(paragraph.text) == paragraph.text
    assert snippet_text(Document(page_content=paragraph.text, metadata={"title": paragraph.title})) == paragraph.text
    assert snippet_text(TextNode(text=paragraph.text)) == paragraph.text  # get_content()
    assert snippet_text(paragraph) == paragraph.text  # .text
    assert snippet_text(Hit(paragraph.id, paragraph.text, 1.0, paragraph.title)) == paragraph.text
    assert isinstance(paragraph, CorpusRecord)


def test_objects_without_text_are_refused():
    with pytest.raises(TypeError, match=r"must be a str or have page_content"):
        snippet_text(42)
    with pytest.raises(TypeError, match=r"must be a str or have page_content"):
        snippet_text({"text": "a dict is not a document"})
    with pytest.raises(TypeError, match=r"the snippet's text must be a str, got NoneType from CorpusRecord"):
        snippet_text(CorpusRecord("p1", "title", None))

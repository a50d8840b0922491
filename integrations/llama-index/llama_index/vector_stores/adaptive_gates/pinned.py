"""Vector stores whose package pins a dependency the core installs at another version.

LlamaIndex's ``MilvusVectorStore`` (``llama-index-vector-stores-milvus``) declares
``pymilvus<3``; the core's Milvus extra installs pymilvus 3. Over pymilvus 3 the store
serves until Milvus restarts, then every search fails with a raw ``MilvusException``
(the collection stays released). The memory refuses such a store when it is built, with
the versions that do not go together, instead of failing after the next restart.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from adaptive_gates import BackendMisconfiguredError

#: Store class (by module and name) -> its distribution and the dependency it pins.
PINNED_STORES: dict[tuple[str, str], tuple[str, str]] = {
    ("llama_index.vector_stores.milvus.base", "MilvusVectorStore"): ("llama-index-vector-stores-milvus", "pymilvus"),
}


def refuse_unmet_pin(store: Any) -> None:
    """Raise ``BackendMisconfiguredError`` when ``store``'s package declares a version of
    a dependency (``PINNED_STORES``) that the installed one does not meet."""
    pinned = PINNED_STORES.get((type(store).__module__, type(store).__name__))
    if pinned is None:
        return
    distribution, dependency = pinned
    try:
        declared = metadata.requires(distribution) or []
        store_version, installed = metadata.version(distribution), metadata.version(dependency)
    except metadata.PackageNotFoundError:
        return
    for line in declared:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != dependency or requirement.marker is not None:
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            raise BackendMisconfiguredError(
                f"{type(store).__name__} comes from {distribution} {store_version}, which needs "
                f"{dependency}{requirement.specifier}, but {dependency} {installed} is installed (the version "
                f"adaptive-gates' milvus extra installs): the store works until Milvus restarts, then every "
                "search fails with a MilvusException. Keep the SKR memory in Milvus with the core's "
                "MilvusMemory (adaptive_gates.milvus.MilvusMemory.factory(uri, collection)), or use this store "
                f"where {dependency}{requirement.specifier} is installed"
            )

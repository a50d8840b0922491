"""Milvus, in one place: the client and its collections, the SKR memory kept there, and the
corpus retrieved from there, shared by every process pointed at one server."""

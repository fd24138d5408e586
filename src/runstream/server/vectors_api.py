"""Mastra's vector routes: a store's indexes, upserts and queries, for ``@mastra/client-js``'s
``getVector(name)`` (``createIndex``, ``upsert``, ``query``, ``getIndexes``, ``details``,
``delete``), ``listVectors()`` and ``listEmbedders()``.

Who may touch what: only the stores registered on the runtime by name
(``Runstream(vectors={"docs": SqliteVector(...)})``) are reachable; another name answers 404.
Semantic recall's indexes (``mastra_memory_*``) hold every resource's messages and are never
served (404, absent from listings).

A caller confined to a resource (a tenant) has its own namespace in each store: the index it
calls ``notes`` is stored as ``r<16 hex digits of the resource's SHA-256>_notes``. It creates,
upserts into, queries, lists and deletes its own indexes, with the same calls and answers as
an unconfined caller; another tenant's index, or the application's, is simply not there (404,
absent from its listing), whatever name or filter it sends: the name is always prefixed, never
parsed. Its index names are at most :data:`MAX_TENANT_NAME` characters, and it holds at most
:data:`MAX_INDEXES_PER_RESOURCE` indexes per store. An unconfined caller sees every index,
tenants' included, by its stored name.

Sizes are bounded: a dimension of at most ``MAX_DIMENSION``, ``topK`` of at most
``MAX_TOP_K``, at most ``MAX_VECTORS_PER_REQUEST`` vectors per upsert, and filters as
:mod:`runstream.vector.filter` bounds them; a bad value is a 400, never a 500.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import cast, get_args

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runstream._json import JsonValue
from runstream.server.auth import principal_of
from runstream.server.context import ServerContext, json_body
from runstream.server.errors import ApiError
from runstream.vector.base import (
    MAX_DIMENSION,
    MAX_TOP_K,
    Metric,
    VectorIndexExistsError,
    VectorIndexNotFoundError,
    VectorStore,
    check_name,
)

MAX_VECTORS_PER_REQUEST = 1000
MEMORY_PREFIX = "mastra_memory_"
_NAME_LIMIT = 63
_TENANT_PREFIX_LENGTH = len("r0123456789abcdef_")
MAX_TENANT_NAME = _NAME_LIMIT - _TENANT_PREFIX_LENGTH
MAX_INDEXES_PER_RESOURCE = 32
_METRICS: dict[str, Metric] = {metric: metric for metric in get_args(Metric)}


def tenant_prefix(resource_id: str) -> str:
    """The namespace of a resource's indexes (a digest: any resource id, any length)."""
    return f"r{hashlib.sha256(resource_id.encode()).hexdigest()[:16]}_"


@contextmanager
def _as_named(name: str) -> Iterator[None]:
    """A store's index errors told with the caller's name, not the stored one."""
    try:
        yield
    except VectorIndexNotFoundError:
        raise ApiError(404, f"Index {name} not found") from None
    except VectorIndexExistsError:
        raise ApiError(409, f"Index {name} exists with another dimension or metric") from None


EMBEDDING_MODELS = [
    ("openai", "text-embedding-3-small", 1536, 8191, "OpenAI text-embedding-3-small model"),
    ("openai", "text-embedding-3-large", 3072, 8191, "OpenAI text-embedding-3-large model"),
    ("openai", "text-embedding-ada-002", 1536, 8191, "OpenAI text-embedding-ada-002 model"),
    ("google", "gemini-embedding-001", 768, 2048, "Google gemini-embedding-001 model"),
]
"""Mastra's ``EMBEDDING_MODELS``, as ``GET /embedders`` lists them."""


class VectorRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        v = "/vector/{vector_name}"
        return [
            Route("/vectors", self.list_vectors),
            Route("/embedders", self.list_embedders),
            Route(f"{v}/create-index", self.create_index, methods=["POST"]),
            Route(f"{v}/upsert", self.upsert, methods=["POST"]),
            Route(f"{v}/query", self.query, methods=["POST"]),
            Route(f"{v}/indexes", self.list_indexes),
            Route(f"{v}/indexes/{{index_name}}", self.describe_index),
            Route(f"{v}/indexes/{{index_name}}", self.delete_index, methods=["DELETE"]),
        ]

    def _store(self, request: Request) -> tuple[VectorStore, str]:
        """The store and the caller's namespace prefix (``""`` when unconfined)."""
        name = request.path_params["vector_name"]
        store = self.ctx.runstream.vectors.get(name)
        if store is None:
            raise ApiError(404, f"Vector store {name} not found")
        resource = principal_of(request).resource_id
        return store, "" if resource is None else tenant_prefix(resource)

    @staticmethod
    def _index(value: JsonValue, prefix: str) -> str:
        """The stored name of the caller's index ``value``."""
        if not isinstance(value, str) or not value:
            raise ApiError(400, "Invalid request: 'indexName' is required")
        check_name(value)
        if value.startswith(MEMORY_PREFIX):
            raise ApiError(404, f"Index {value} not found")
        if len(prefix) + len(value) > _NAME_LIMIT:
            raise ApiError(400, f"Invalid request: index names are at most {MAX_TENANT_NAME} characters")
        return prefix + value

    async def list_vectors(self, request: Request) -> Response:
        stores = self.ctx.runstream.vectors
        return JSONResponse(
            {"vectors": [{"name": n, "id": n, "type": type(s).__name__} for n, s in stores.items()]}
        )

    async def list_embedders(self, request: Request) -> Response:
        return JSONResponse(
            {
                "embedders": [
                    {
                        "id": f"{provider}/{model}",
                        "provider": provider,
                        "name": model,
                        "description": description,
                        "dimensions": dimensions,
                        "maxInputTokens": tokens,
                    }
                    for provider, model, dimensions, tokens, description in EMBEDDING_MODELS
                ]
            }
        )

    async def create_index(self, request: Request) -> Response:
        store, prefix = self._store(request)
        body = await json_body(request)
        index = self._index(body.get("indexName"), prefix)
        dimension = body.get("dimension")
        if (
            isinstance(dimension, bool)
            or not isinstance(dimension, int)
            or not 1 <= dimension <= MAX_DIMENSION
        ):
            raise ApiError(
                400,
                f"Invalid request index, indexName and a dimension from 1 to {MAX_DIMENSION} are required.",
            )
        named = body.get("metric", "cosine")
        metric = _METRICS.get(named) if isinstance(named, str) else None
        if metric is None:
            raise ApiError(400, "Invalid metric. Must be one of: cosine, euclidean, dotproduct")
        if prefix:
            own = [n for n in await store.list_indexes() if n.startswith(prefix)]
            if index not in own and len(own) >= MAX_INDEXES_PER_RESOURCE:
                raise ApiError(400, f"At most {MAX_INDEXES_PER_RESOURCE} indexes per resource in a store")
        config = cast("Mapping[str, JsonValue] | None", body.get("indexConfig"))  # the store checks it
        with _as_named(index.removeprefix(prefix)):
            await store.create_index(index, dimension, metric, index_config=config)
        return JSONResponse({"success": True})

    async def upsert(self, request: Request) -> Response:
        store, prefix = self._store(request)
        body = await json_body(request)
        index = self._index(body.get("indexName"), prefix)
        vectors = body.get("vectors")
        if not isinstance(vectors, list):
            raise ApiError(400, "Invalid request index. indexName and vectors array are required.")
        if len(vectors) > MAX_VECTORS_PER_REQUEST:
            raise ApiError(400, f"At most {MAX_VECTORS_PER_REQUEST} vectors per upsert")
        metadata, ids = body.get("metadata"), body.get("ids")
        if metadata is not None and not isinstance(metadata, list):
            raise ApiError(400, "Invalid request: 'metadata' must be an array of objects")
        if ids is not None and not isinstance(ids, list):
            raise ApiError(400, "Invalid request: 'ids' must be an array of strings")
        # the store checks each vector, metadata object and id (a bad one is a 400)
        checked = cast("list[Sequence[float]]", vectors)
        with _as_named(index.removeprefix(prefix)):
            stored = await store.upsert(
                index,
                checked,
                cast("list[Mapping[str, JsonValue]] | None", metadata),
                cast("list[str] | None", ids),
            )
            return JSONResponse({"ids": stored})

    async def query(self, request: Request) -> Response:
        store, prefix = self._store(request)
        body = await json_body(request)
        index = self._index(body.get("indexName"), prefix)
        vector = body.get("queryVector")
        if not isinstance(vector, list):
            raise ApiError(400, "Invalid request query. indexName and queryVector array are required.")
        top_k = body.get("topK", 10)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise ApiError(400, f"Invalid request query: topK must be an integer from 1 to {MAX_TOP_K}")
        flt = body.get("filter")
        if flt is not None and not isinstance(flt, dict):
            raise ApiError(400, "Invalid request query: 'filter' must be an object")
        min_score = body.get("minScore")
        if min_score is not None and (isinstance(min_score, bool) or not isinstance(min_score, int | float)):
            raise ApiError(400, "Invalid request query: 'minScore' must be a number")
        with _as_named(index.removeprefix(prefix)):
            hits = await store.query(
                index,
                cast("list[float]", vector),  # the store checks it
                top_k=top_k,
                filter=flt,
                include_vector=body.get("includeVector") is True,
                min_score=min_score,
            )
        return JSONResponse([hit.to_json() for hit in hits])

    async def list_indexes(self, request: Request) -> Response:
        store, prefix = self._store(request)
        names = [
            n.removeprefix(prefix)
            for n in await store.list_indexes()
            if n.startswith(prefix) and not n.startswith(MEMORY_PREFIX)
        ]
        return JSONResponse(names)

    async def describe_index(self, request: Request) -> Response:
        store, prefix = self._store(request)
        name = request.path_params["index_name"]
        with _as_named(name):
            stats = await store.describe_index(self._index(name, prefix))
        return JSONResponse(stats.to_json())

    async def delete_index(self, request: Request) -> Response:
        store, prefix = self._store(request)
        name = request.path_params["index_name"]
        with _as_named(name):
            await store.delete_index(self._index(name, prefix))
        return JSONResponse({"success": True})

"""Mastra's vector routes: a store's indexes, upserts and queries, for ``@mastra/client-js``'s
``getVector(name)`` (``createIndex``, ``upsert``, ``query``, ``getIndexes``, ``details``,
``delete``), ``listVectors()`` and ``listEmbedders()``.

Who may touch what: only the stores registered on the runtime by name
(``Runstream(vectors={"docs": SqliteVector(...)})``) are reachable; another name answers 404.
A caller confined to a resource may read (list, describe, query) but not create, write or
delete (403): the indexes are the application's, not one resource's. Semantic recall's indexes
(``mastra_memory_*``) hold every resource's messages and are never served (404, absent from
listings). Sizes are bounded: a dimension of at most ``MAX_DIMENSION``, ``topK`` of at most
``MAX_TOP_K``, at most ``MAX_VECTORS_PER_REQUEST`` vectors per upsert, and filters as
:mod:`runstream.vector.filter` bounds them; a bad value is a 400, never a 500.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runstream.server.auth import principal_of
from runstream.server.context import ServerContext, json_body
from runstream.server.errors import ApiError
from runstream.vector.base import MAX_DIMENSION, MAX_TOP_K, VectorStore, check_name

MAX_VECTORS_PER_REQUEST = 1000
MEMORY_PREFIX = "mastra_memory_"

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

    def _store(self, request: Request, *, write: bool = False) -> VectorStore:
        name = request.path_params["vector_name"]
        store = self.ctx.runstream.vectors.get(name)
        if store is None:
            raise ApiError(404, f"Vector store {name} not found")
        if write and principal_of(request).resource_id is not None:
            raise ApiError(403, "These credentials may read this vector store, not change it")
        return store

    @staticmethod
    def _index(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ApiError(400, "Invalid request: 'indexName' is required")
        check_name(value)
        if value.startswith(MEMORY_PREFIX):
            raise ApiError(404, f"Index {value} not found")
        return value

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
        store = self._store(request, write=True)
        body = await json_body(request)
        index = self._index(body.get("indexName"))
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
        metric = body.get("metric", "cosine")
        if metric not in ("cosine", "euclidean", "dotproduct"):
            raise ApiError(400, "Invalid metric. Must be one of: cosine, euclidean, dotproduct")
        await store.create_index(index, dimension, metric, index_config=body.get("indexConfig"))
        return JSONResponse({"success": True})

    async def upsert(self, request: Request) -> Response:
        store = self._store(request, write=True)
        body = await json_body(request)
        index = self._index(body.get("indexName"))
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
        return JSONResponse({"ids": await store.upsert(index, vectors, metadata, ids)})

    async def query(self, request: Request) -> Response:
        store = self._store(request)
        body = await json_body(request)
        index = self._index(body.get("indexName"))
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
        hits = await store.query(
            index,
            vector,
            top_k=top_k,
            filter=flt,
            include_vector=body.get("includeVector") is True,
            min_score=min_score,
        )
        return JSONResponse([hit.to_json() for hit in hits])

    async def list_indexes(self, request: Request) -> Response:
        store = self._store(request)
        names = [n for n in await store.list_indexes() if n and not n.startswith(MEMORY_PREFIX)]
        return JSONResponse(names)

    async def describe_index(self, request: Request) -> Response:
        store = self._store(request)
        stats = await store.describe_index(self._index(request.path_params["index_name"]))
        return JSONResponse(stats.to_json())

    async def delete_index(self, request: Request) -> Response:
        store = self._store(request, write=True)
        await store.delete_index(self._index(request.path_params["index_name"]))
        return JSONResponse({"success": True})

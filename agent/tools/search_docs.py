"""The ``search_docs`` tool: search the ingested documentation (BM25, or hybrid with a dense
embeddings backend) and return the best chunks.

Arguments ``{query, top_k (1-20, default 5), collection_name?}``; the result is
``{"results": [{id, source, chunk_index, title, content, vector_distance, bm25_score, score}],
"collection": name}``, best first (see ``agent.knowledge.search``; ``content`` keeps the
chunk's Markdown). What the model should reason about is data in the result, with
``results`` empty and a ``message``: an empty query, an unknown collection (``collections``
lists those that exist), nothing found.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agent.tools.registry import Tool, ToolContext

DEFAULT_TOP_K = 5
MAX_TOP_K = 20
MAX_QUERY_CHARS = 2000

DESCRIPTION = (
    "Search the team's documentation (the ingested collection) and return the most relevant "
    "passages with their source file, chunk index and title. Use it for questions about how "
    "things work, how to configure or run them, and where something is documented. Write "
    "the query as keywords or a short question; cite the sources you use."
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "maxLength": MAX_QUERY_CHARS,
            "description": "What to look for: keywords or a short question.",
        },
        "top_k": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_TOP_K,
            "default": DEFAULT_TOP_K,
            "description": "How many passages to return.",
        },
        "collection_name": {
            "type": "string",
            "description": "The collection to search (default: the one this conversation uses).",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}

_RESULT_ITEM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "source": {"type": "string"},
        "chunk_index": {"type": ["integer", "null"]},
        "title": {"type": "string"},
        "content": {"type": "string", "maxLength": 800},
        "vector_distance": {"type": "number"},
        "bm25_score": {"type": "number"},
        "score": {"type": "number"},
    },
    "required": [
        "id",
        "source",
        "chunk_index",
        "title",
        "content",
        "vector_distance",
        "bm25_score",
        "score",
    ],
}

RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "results": {"type": "array", "items": _RESULT_ITEM},
        "collection": {"type": "string"},
    },
    "required": ["results"],
}


def search_docs(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Run the search (sync: the registry calls it in a worker thread, off the event loop).
    Raises only when the search itself cannot work (``EmbeddingsMismatch``,
    ``EmbeddingsUnavailable``), which the registry reports as ``tool_failed``."""
    # chromadb takes seconds to import: only processes that search pay for it, not every
    # process that builds the tool registry.
    from agent.knowledge.search import search
    from agent.knowledge.store import CollectionInvalid, CollectionNotFound, collection_names

    query = " ".join(str(args["query"]).split())
    top_k = int(args.get("top_k", DEFAULT_TOP_K))
    collection = str(
        args.get("collection_name") or context.collection or settings.KNOWLEDGE_DEFAULT_COLLECTION
    )
    if not query:
        return {
            "results": [],
            "message": "The query is empty: give search_docs some keywords or a question.",
        }
    try:
        results = search(query=query, top_k=top_k, collection=collection)
    except (CollectionNotFound, CollectionInvalid) as exc:
        names = collection_names()
        listed = ", ".join(names) or "none (nothing has been ingested yet)"
        problem = (
            f"Unknown collection {collection!r}."
            if isinstance(exc, CollectionNotFound)
            else exc.message
        )
        return {
            "results": [],
            "message": f"{problem} Existing collections: {listed}.",
            "collections": names,
        }
    # The collection is named once, for the whole observation.
    found = [{k: v for k, v in r.as_dict().items() if k != "collection"} for r in results]
    observation: dict[str, Any] = {"results": found, "collection": collection}
    if not results:
        observation["message"] = f"Nothing in {collection!r} matches {query!r}."
    return observation


TOOL = Tool(
    name="search_docs",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    handler=search_docs,
    result_schema=RESULT_SCHEMA,
)

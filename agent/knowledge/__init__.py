"""Knowledge: document ingestion, the Chroma store, BM25 and hybrid search, RAG answers.

Only this package imports ``chromadb`` (in ``agent.knowledge.store``). See docs/knowledge.md.
"""

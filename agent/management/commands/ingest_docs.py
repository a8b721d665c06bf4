from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from agent.exceptions import CollectionNotFound, EmbeddingsMismatch
from agent.knowledge.collections import collection_remove
from agent.knowledge.ingest import IngestSummary, ingest_paths
from devassist.exceptions import DomainError

#: Fewer files than this are ingested without a progress bar.
PROGRESS_MIN_FILES = 20


class Command(BaseCommand):
    help = (
        "Ingest Markdown, reStructuredText, plain text, HTML and Python files (directories are "
        "walked) into a knowledge collection. Idempotent: unchanged files are skipped, changed "
        "files replace their chunks, files deleted under the given paths lose theirs; "
        "unsupported and empty files are listed and skipped. Prints a summary line."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH", help="Files or directories.")
        parser.add_argument(
            "--collection",
            default=settings.KNOWLEDGE_DEFAULT_COLLECTION,
            help="Collection name (default: %(default)s).",
        )
        parser.add_argument(
            "--no-progress", action="store_true", help="Never show the progress bar."
        )
        parser.add_argument(
            "--rebuild",
            action="store_true",
            help="Delete the collection first and ingest everything again (needed after "
            "switching the embeddings backend).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        bar: tqdm[Any] | None = None

        def progress(done: int, total: int) -> None:
            nonlocal bar
            if options["no_progress"] or total < PROGRESS_MIN_FILES:
                return
            if bar is None:
                # tqdm redraws one line with "\r"; Django's OutputWrapper would add a newline
                # to every write, so the bar goes to the stream underneath.
                stream = getattr(self.stderr, "_out", sys.stderr)
                bar = tqdm(total=total, unit="file", desc="Ingesting", file=stream, disable=None)
            bar.update(done - bar.n)

        try:
            if options["rebuild"]:
                self._drop(options["collection"])
            summary: IngestSummary = ingest_paths(
                paths=options["paths"], collection=options["collection"], progress=progress
            )
        except EmbeddingsMismatch as exc:
            raise CommandError(f"{exc.message} (--rebuild does that)") from exc
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        finally:
            if bar is not None:
                bar.close()
        self.stdout.write(summary.line())

    def _drop(self, name: str) -> None:
        try:
            collection_remove(name=name)
        except CollectionNotFound:
            return
        self.stdout.write(f"Deleted collection {name!r} to rebuild it.")

"""Bounded capture of a process's output: head and tail kept, the middle counted and dropped."""

from __future__ import annotations

import codecs
import time
from collections import deque
from collections.abc import Callable

DEFAULT_LIMIT_CHARS = 20_000
# UTF-8 needs at most four bytes a character; keeping this many bytes is enough to cut by
# characters afterwards without holding more than a few hundred KiB whatever the output size.
_BYTES_PER_CHAR = 4


class CappedStream:
    """Accumulates one output stream, keeping at most about ``8 * limit_chars`` bytes.

    ``text()`` returns the whole output when it fits in ``limit_chars`` characters, otherwise
    its first and last ``limit_chars // 2`` characters around a marker that says how much was
    left out. Bytes are decoded as UTF-8 with replacement characters.
    """

    def __init__(self, limit_chars: int = DEFAULT_LIMIT_CHARS) -> None:
        self.limit_chars = limit_chars
        self.head_chars = limit_chars // 2
        self.tail_chars = limit_chars - self.head_chars
        self._head_cap = limit_chars * _BYTES_PER_CHAR
        self._tail_cap = self.tail_chars * _BYTES_PER_CHAR
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self.total_bytes = 0

    def feed(self, data: bytes) -> None:
        self.total_bytes += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail.append(data)
        self._tail_bytes += len(data)
        while self._tail and self._tail_bytes - len(self._tail[0]) >= self._tail_cap:
            self._tail_bytes -= len(self._tail.popleft())

    @property
    def overflowed(self) -> bool:
        """True once bytes were dropped from the middle."""
        return self.total_bytes > len(self._head) + self._tail_bytes

    def text(self) -> tuple[str, bool]:
        """(text, truncated)."""
        if not self.overflowed and not self._tail:
            whole = self._head.decode("utf-8", errors="replace")
            if len(whole) <= self.limit_chars:
                return whole, False
            return self._cut(whole[: self.head_chars], whole[-self.tail_chars :], len(whole)), True
        tail_bytes = b"".join(self._tail)
        if not self.overflowed:
            whole = (bytes(self._head) + tail_bytes).decode("utf-8", errors="replace")
            if len(whole) <= self.limit_chars:
                return whole, False
            return self._cut(whole[: self.head_chars], whole[-self.tail_chars :], len(whole)), True
        head = self._head.decode("utf-8", errors="replace")[: self.head_chars]
        tail = tail_bytes.decode("utf-8", errors="replace")[-self.tail_chars :]
        return self._cut(head, tail, None), True

    def _cut(self, head: str, tail: str, total_chars: int | None) -> str:
        if total_chars is not None:
            omitted = f"{total_chars - len(head) - len(tail):,} characters"
        else:
            omitted = f"about {self.total_bytes - len(head.encode()) - len(tail.encode()):,} bytes"
        return f"{head}\n… [output truncated: {omitted} omitted] …\n{tail}"


#: The least time between two hand-overs of live output (the first piece after a quiet spell
#: goes at once): a program that floods its output reaches its reader as a few pieces a second.
LIVE_INTERVAL_S = 0.15
#: A live stream's pieces (``stdout`` or ``stderr``, text) for a caller, from the reading thread.
OutputSink = Callable[[str, str], None]


class LiveOutput:
    """What a running program prints, handed to ``sink`` while it runs.

    Bytes are decoded as UTF-8 (a character split across reads waits for its last byte;
    invalid bytes become U+FFFD). Text is gathered and handed over at most once per
    ``interval_s`` (stdout's piece, then stderr's); text that ends a line after a quiet spell
    goes at once, a line still being written waits up to ``interval_s`` for its end. Each
    stream passes on at most ``limit_chars`` characters, then
    ``live_marker(limit_chars)`` and nothing more. ``flush`` must be called on every wake-up of
    the reader (``due_in`` says when the next one is needed) and with ``final=True`` at the end.
    """

    def __init__(
        self,
        sink: OutputSink,
        *,
        limit_chars: int = DEFAULT_LIMIT_CHARS,
        interval_s: float = LIVE_INTERVAL_S,
    ) -> None:
        self.sink = sink
        self.limit_chars = limit_chars
        self.interval_s = interval_s
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")(errors="replace")
            for name in ("stdout", "stderr")
        }
        self._pending = {"stdout": "", "stderr": ""}
        self._taken = {"stdout": 0, "stderr": 0}
        self._cut: set[str] = set()
        self._last = -interval_s
        self._since = 0.0  # when the gathered text began

    def feed(self, stream: str, data: bytes) -> None:
        """Take ``data`` printed on ``stream`` (``stdout`` or ``stderr``); hands over what is
        due."""
        if stream not in self._cut:
            if not any(self._pending.values()):
                self._since = time.monotonic()
            text = self._decoders[stream].decode(data)
            room = self.limit_chars - self._taken[stream]
            if len(text) > room:
                text = text[:room] + live_marker(self.limit_chars)
                self._cut.add(stream)
            self._taken[stream] += len(text)
            self._pending[stream] += text
        self.flush()

    def due_in(self) -> float | None:
        """Seconds until gathered text must be handed over; None when none is gathered."""
        due = self._due_at()
        return None if due is None else max(0.0, due - time.monotonic())

    def _due_at(self) -> float | None:
        texts = [text for text in self._pending.values() if text]
        if not texts:
            return None
        due = self._last + self.interval_s
        if not all(text.endswith("\n") for text in texts):
            due = max(due, self._since + self.interval_s)
        return due

    def flush(self, *, final: bool = False) -> None:
        """Hand over the gathered text if its time has come, or all of it when ``final``."""
        if final:
            for stream, decoder in self._decoders.items():
                if stream not in self._cut:
                    self._pending[stream] += decoder.decode(b"", final=True)
        else:
            due = self._due_at()
            if due is None or time.monotonic() < due:
                return
        if not any(self._pending.values()):
            return
        self._last = time.monotonic()
        for stream in ("stdout", "stderr"):
            text, self._pending[stream] = self._pending[stream], ""
            if text:
                self.sink(stream, text)


def live_marker(limit_chars: int) -> str:
    """What ends a live stream cut at ``limit_chars`` characters."""
    return (
        f"\n… [live output stops at {limit_chars:,} characters; the result keeps the start "
        "and the end] …\n"
    )

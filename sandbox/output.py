"""Bounded capture of a process's output: head and tail kept, the middle counted and dropped."""

from __future__ import annotations

from collections import deque

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

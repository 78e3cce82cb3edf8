"""``Prefetcher``: an iterator read in a background thread a few items ahead of its consumer (the training
loader's batches, a compressed input's decompressed blocks)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

_END = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def _produce(source: Iterator, out: queue.Queue, stop: threading.Event) -> None:
    def put(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    try:
        for item in source:
            if not put(item):
                return
        put(_END)
    except BaseException as e:  # handed to the consumer, raised there
        put(_Failure(e))


class Prefetcher:
    """Iterates ``source`` in a background thread, up to ``depth`` items ahead.

    Errors in the thread are raised in the consumer; dropping or closing the iterator stops the thread.
    """

    def __init__(self, source: Iterator, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=_produce, args=(source, self._queue, self._stop), daemon=True,
                                        name="dlrmflow-prefetch")
        self._thread.start()

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END or isinstance(item, _Failure):
            self._done = True
            self.close()
            if item is _END:
                raise StopIteration
            raise item.error
        return item

    def close(self) -> None:
        """Stop the background thread and wait for it (it exits within 0.1 s of finishing its batch).

        Waiting matters: a thread still inside a torch op while the interpreter shuts down
        aborts the process ("terminate called without an active exception")."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def __del__(self):
        self.close()

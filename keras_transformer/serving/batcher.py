"""Batching across requests, as TensorFlow Serving's batching does: every
sentence of every request waits in one bounded queue; a worker takes the
sentences that are waiting, up to a token budget, once the first of them has
waited `max_wait` seconds or the budget is full, and translates them in one
call; the sentences that arrive while a batch is decoding join a later one.
Two workers (`workers`) keep a batch decoding while the next one gathers, as
the `Translator` keeps two searches in flight.

Sentences are searched independently of the others in their batch (padding
is masked, finished sentences leave the batch), so every answer is what
translating that sentence alone gives; the tests check it.

A request whose sentences do not fit in the queue is refused whole
(`QueueFull`), so memory stays bounded however many clients send.
"""

import asyncio
import collections
import dataclasses
import threading
import time


class QueueFull(Exception):
    """The queue cannot take the request's sentences now."""


@dataclasses.dataclass
class _Sentence:
    text: str
    tokens: int
    n_best: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float


class Batcher:
    """Translates the sentences of concurrent requests in shared batches.

    Args:
        runtime: a `runtimes.Runtime` (its `translate` and `source_lengths`).
        batch_tokens: source tokens a batch holds at most (each sentence's
            tokens, cut to the model's limit, and its end token).
        max_wait: seconds the first sentence of a batch waits for others.
        max_queue: sentences that may wait at once.
        workers: batches decoding at once.
        observe: called with `(sentences, tokens, seconds)` after each batch
            (metrics).
    """

    def __init__(self, runtime, batch_tokens=2048, max_wait=0.005, max_queue=1024, workers=2,
                 observe=None):
        self.runtime = runtime
        self.batch_tokens = batch_tokens
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.observe = observe
        self._queue = collections.deque()
        self._condition = threading.Condition()
        self._stopping = False
        self._threads = [threading.Thread(target=self._work, name=f"batcher-{index}", daemon=True)
                         for index in range(workers)]

    def start(self):
        for thread in self._threads:
            thread.start()

    def stop(self):
        """Lets the workers translate what is queued, then end."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        for thread in self._threads:
            thread.join()

    @property
    def queued(self):
        """Sentences waiting (not yet in a batch)."""
        return len(self._queue)

    async def translate(self, sentences, n_best=1):
        """The translations of `sentences` (each a list of up to `n_best`
        `(text, score)` pairs), once their batches are done.

        Raises:
            QueueFull: the queue cannot take them all now (nothing of the
                request is queued).
        """
        loop = asyncio.get_running_loop()
        limit = self.runtime.max_source_tokens
        lengths = await loop.run_in_executor(None, self.runtime.source_lengths, sentences)
        with self._condition:
            if self._stopping or len(self._queue) + len(sentences) > self.max_queue:
                raise QueueFull()
            now = time.monotonic()
            items = [_Sentence(text, min(length, limit) + 1, n_best, loop.create_future(), loop,
                               now) for text, length in zip(sentences, lengths)]
            self._queue.extend(items)
            self._condition.notify_all()
        return await asyncio.gather(*(item.future for item in items))

    def _take(self):
        """The next batch (waiting for it), or None once stopped and empty."""
        with self._condition:
            while not self._queue:
                if self._stopping:
                    return None
                self._condition.wait()
            deadline = self._queue[0].arrived + self.max_wait
            while (not self._stopping and sum(item.tokens for item in self._queue) < self.batch_tokens
                   and (remaining := deadline - time.monotonic()) > 0):
                self._condition.wait(remaining)
            if not self._queue:  # another worker took them meanwhile
                return []
            batch = [self._queue.popleft()]
            tokens = batch[0].tokens
            while self._queue and tokens + self._queue[0].tokens <= self.batch_tokens:
                tokens += self._queue[0].tokens
                batch.append(self._queue.popleft())
            return batch

    def _work(self):
        while (batch := self._take()) is not None:
            if not batch:
                continue
            started = time.monotonic()
            try:
                results = self.runtime.translate([item.text for item in batch],
                                                 n_best=max(item.n_best for item in batch))
            except Exception as error:  # the requests' 500s; the worker carries on
                for item in batch:
                    item.loop.call_soon_threadsafe(_settle, item.future, None, error)
                continue
            for item, result in zip(batch, results):
                item.loop.call_soon_threadsafe(_settle, item.future, result[:item.n_best], None)
            if self.observe is not None:
                self.observe(len(batch), sum(item.tokens for item in batch),
                             time.monotonic() - started)


def _settle(future, result, error):
    if future.cancelled():  # the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)

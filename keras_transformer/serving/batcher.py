"""Batching across requests, as TensorFlow Serving's batching does: every
sentence of every request waits in one bounded queue; a worker takes the
sentences that are waiting, up to a token budget, and translates them in one
call; the sentences that arrive while a batch is decoding join a later one.
Two workers (`workers`) keep two batches decoding, as the `Translator` keeps
two searches in flight.

Sentences are searched independently of the others in their batch (padding
is masked, finished sentences leave the batch), so every answer is what
translating that sentence alone gives; the tests check it.

A batch takes its worker's share of the sentences in the server (those
waiting and those being translated, over the workers): on an idle server
the first sentence starts at once; a worker that frees while another
decodes waits (at most `max_wait` after its first sentence came) until it
holds about as many as that one. Taking whatever waited instead, one worker
came to hold most of many clients' sentences in one long batch while the
other cycled through a few stragglers, and the server answered fewer
sentences a second (docs/benchmarks-log.md, "Serving over HTTP").

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

    def __init__(self, runtime, batch_tokens=2048, max_wait=0.03, max_queue=1024, workers=2,
                 observe=None):
        self.runtime = runtime
        self.batch_tokens = batch_tokens
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.observe = observe
        self._queue = collections.deque()
        self._condition = threading.Condition()
        self._stopping = False
        self._translating = 0  # sentences in the batches being translated
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
        lengths = self.runtime.source_lengths(sentences)  # plain Python, microseconds
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
        """The next batch (waiting for it), or None once stopped and empty.

        A batch starts once it can take its share of the sentences in the
        server (waiting and being translated, over the workers), its token
        budget is full, or its first sentence has waited `max_wait`: an
        idle server starts on the first sentence at once, and a worker that
        frees while another decodes gathers about as many as that one holds."""
        with self._condition:
            while not self._queue:
                if self._stopping:
                    return None
                self._condition.wait()
            deadline = self._queue[0].arrived + self.max_wait
            while True:
                share = -(-(len(self._queue) + self._translating) // len(self._threads))
                remaining = deadline - time.monotonic()
                if (self._stopping or len(self._queue) >= share or remaining <= 0
                        or sum(item.tokens for item in self._queue) >= self.batch_tokens):
                    break
                self._condition.wait(remaining)
                if not self._queue:  # another worker took them meanwhile
                    return []
            batch = [self._queue.popleft()]
            tokens = batch[0].tokens
            while (self._queue and len(batch) < share
                   and tokens + self._queue[0].tokens <= self.batch_tokens):
                tokens += self._queue[0].tokens
                batch.append(self._queue.popleft())
            self._translating += len(batch)
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
                results = None
                for item in batch:
                    item.loop.call_soon_threadsafe(_settle, item.future, None, error)
            finally:
                with self._condition:
                    self._translating -= len(batch)
                    self._condition.notify_all()
            if results is None:
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

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

With a runtime that has continuous batching (`Runtime.slot_translator`:
the Keras runtime opened with `slots`), the queue instead feeds each
worker's slots (`decoding.slots`): between steps, a worker admits waiting
sentences into its free slots, up to its share of the sentences in the server, and each
sentence's answer is settled at the step it ends, not when its batch does.
A short sentence sent while long ones decode then waits for a step, not a
batch; a worker that has free slots and nothing waiting returns from its
search every `SLOT_STEPS` steps to look for newcomers. The sentences of a
client that went away (its futures cancelled) leave their slots at once.

A request whose sentences do not fit in the queue is refused whole
(`QueueFull`), so memory stays bounded however many clients send; so are
the slots' caches (`SlotSearch`).
"""

import asyncio
import collections
import dataclasses
import itertools
import threading
import time

SLOT_STEPS = 4
"""Steps a worker with free slots and nothing waiting runs before it looks
at the queue again."""


class QueueFull(Exception):
    """The queue cannot take the request's sentences now."""


@dataclasses.dataclass(eq=False)  # told apart by identity: keys of the slots
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
        first = self.runtime.slot_translator(1)
        if first is None:
            self._work_batches()
        else:
            self._work_slots(first)

    def _work_batches(self):
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

    def _admit(self, searches, live):
        """Takes the waiting sentences this worker's slots admit now (waiting
        for some, or for a live one of its own), up to its share of the
        sentences in the server; None once stopped with nothing left."""
        with self._condition:
            while not self._queue and not live:
                if self._stopping:
                    return None
                self._condition.wait()
            share = -(-(len(self._queue) + self._translating) // len(self._threads))
            taken = []
            while self._queue and len(live) + len(taken) < max(share, 1):
                n_best = self._queue[0].n_best
                if n_best not in searches:
                    searches[n_best] = self.runtime.slot_translator(n_best)
                if searches[n_best].free <= sum(item.n_best == n_best for item in taken):
                    break
                taken.append(self._queue.popleft())
            self._translating += len(taken)
            return taken

    def _work_slots(self, first):
        """A worker of continuous batching (see the module docstring)."""
        searches = {1: first}  # n_best -> this worker's SlotTranslator
        live = set()  # this worker's sentences in its slots
        while (taken := self._admit(searches, live)) is not None:
            for n_best, group in itertools.groupby(sorted(taken, key=lambda item: item.n_best),
                                                   key=lambda item: item.n_best):
                group = list(group)
                searches[n_best].join([item.text for item in group], group)
                live.update(group)
            with self._condition:
                waiting = bool(self._queue)
            for n_best, search in searches.items():
                if not search.live:
                    continue
                started = time.monotonic()
                try:
                    ended = search.advance(2**30 if waiting else SLOT_STEPS)
                except Exception as error:  # the requests' 500s; the worker carries on
                    failed = [item for item in live if item.n_best == n_best]
                    searches[n_best] = self.runtime.slot_translator(n_best)
                    ended = [(item, error, None) for item in failed]
                self._settled(live, ended, started)
            # A client that went away: its sentences leave their slots.
            gone = [item for item in live if item.future.cancelled()]
            for n_best, search in searches.items():
                search.cancel([item for item in gone if item.n_best == n_best])
            self._settled(live, [(item, None, None) for item in gone], None)

    def _settled(self, live, ended, started):
        """Answers the sentences that `ended` (`(item, hypotheses or an
        error, _)` each) and takes them out of `live`."""
        if not ended:
            return
        with self._condition:
            self._translating -= len(ended)
            self._condition.notify_all()
        for item, result, _ in ended:
            live.discard(item)
            if isinstance(result, Exception):
                item.loop.call_soon_threadsafe(_settle, item.future, None, result)
            elif result is not None:
                item.loop.call_soon_threadsafe(_settle, item.future, result, None)
        if self.observe is not None and started is not None:
            self.observe(len(ended), sum(item.tokens for item, _, _ in ended),
                         time.monotonic() - started)


def _settle(future, result, error):
    if future.cancelled():  # the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)

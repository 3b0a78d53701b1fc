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
sentences into its free slots, up to its share of the sentences in the
server. The search hands each sentence over at the step it ends, from
inside its loop, and a thread of the worker's own answers it at once (the
search goes on meanwhile), not when a batch would end. The search returns
only when the queue says that newcomers are due (through the translator's
`wakeup`, which its loop reads at each step): once a quarter of a worker's
slots' worth wait, or the first has waited `max_wait`, and a slot is free.
(Returning to admit each newcomer alone cost more than it saved: a return
and an encoder call each.) A short sentence sent while long ones decode
then waits at most `max_wait` and a step to start, not a batch. The
sentences of a client that went away (its futures cancelled) leave their
slots at the next step.

A request whose sentences do not fit in the queue is refused whole
(`QueueFull`), so memory stays bounded however many clients send; so are
the slots' caches (`SlotSearch`).
"""

import asyncio
import collections
import dataclasses
import itertools
import math
import queue
import threading
import time

SLOT_STEPS = 4
"""Steps each search of a worker runs in its turn while several are live
(sentences asking for different numbers of translations)."""


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
    glossary: object = None


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
        self._slot_translators = []  # the workers' (continuous batching), for their wakeups
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

    async def translate(self, sentences, n_best=1, glossary=None):
        """The translations of `sentences` (each a list of up to `n_best`
        `(text, score)` pairs), once their batches are done, obeying
        `glossary` (a `glossary.Glossary`, or None). A batch's sentences of
        different glossaries are translated in one call of the runtime for
        each.

        Raises:
            QueueFull: the queue cannot take them all now (nothing of the
                request is queued).
            GlossaryError: the runtime takes no glossary (one line).
        """
        if glossary is not None:
            self.runtime.check_glossary(glossary)
        loop = asyncio.get_running_loop()
        limit = self.runtime.max_source_tokens
        lengths = self.runtime.source_lengths(sentences)  # plain Python, microseconds
        with self._condition:
            if self._stopping or len(self._queue) + len(sentences) > self.max_queue:
                raise QueueFull()
            now = time.monotonic()
            items = [_Sentence(text, min(length, limit) + 1, n_best, loop.create_future(), loop,
                               now, glossary) for text, length in zip(sentences, lengths)]
            self._queue.extend(items)
            self._wake()
            self._condition.notify_all()
        for item in items:
            item.future.add_done_callback(self._recall)
        try:
            return await asyncio.gather(*(item.future for item in items))
        except asyncio.CancelledError:
            self._withdraw(items)
            raise

    def _withdraw(self, items):
        """A request went away (its client, or a document job as the server
        stops): its sentences still waiting leave the queue, so that no
        worker translates them for nobody (a stopping server translates what
        is queued before it ends: a cancelled document's whole rest, once)."""
        gone = set(items)
        with self._condition:
            kept = [item for item in self._queue if item not in gone]
            if len(kept) < len(self._queue):
                self._queue.clear()
                self._queue.extend(kept)
                self._wake()
                self._condition.notify_all()

    def _wake(self):
        """Tells the workers' running searches when the waiting sentences are
        due to join (called under the lock as the queue changes)."""
        if not self._slot_translators:
            return
        if self._queue:
            waited = time.monotonic() - self._queue[0].arrived
            first = time.time() + max(0.0, self.max_wait - waited)
        for translator in self._slot_translators:
            translator.wakeup.admit_at(
                math.inf if not self._queue
                else 0.0 if len(self._queue) >= max(1, translator.slots // 4) else first)

    def _recall(self, future):
        """A client went away: the searches come back to free its slots."""
        if future.cancelled():
            for translator in list(self._slot_translators):
                translator.wakeup.recall_now()

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
        first = self._slot_translator(1)
        if first is None:
            self._work_batches()
        else:
            self._work_slots(first)

    def _slot_translator(self, n_best):
        """The runtime's `slot_translator(n_best)`, its wakeup told by the queue."""
        translator = self.runtime.slot_translator(n_best)
        if translator is not None:
            with self._condition:
                self._slot_translators.append(translator)
                self._wake()
        return translator

    def _work_batches(self):
        while (batch := self._take()) is not None:
            if not batch:
                continue
            started = time.monotonic()
            try:
                n_best = max(item.n_best for item in batch)
                results = {}
                for glossary in dict.fromkeys(item.glossary for item in batch):
                    group = [item for item in batch if item.glossary is glossary]
                    options = {"glossary": glossary} if glossary is not None else {}
                    results.update(zip(group, self.runtime.translate(
                        [item.text for item in group], n_best=n_best, **options)))
                results = [results[item] for item in batch]
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
        sentences in the server; None once stopped with nothing left (its
        answers given too)."""
        with self._condition:
            while not self._queue and not any(search.live for search in searches.values()):
                if self._stopping and not live:
                    return None
                self._condition.wait()
            share = -(-(len(self._queue) + self._translating) // len(self._threads))
            taken = []
            while self._queue and len(live) + len(taken) < max(share, 1):
                n_best = self._queue[0].n_best
                if n_best not in searches:
                    searches[n_best] = self._slot_translator(n_best)
                if searches[n_best].free <= sum(item.n_best == n_best for item in taken):
                    break
                taken.append(self._queue.popleft())
            self._translating += len(taken)
            self._wake()
            return taken

    def _work_slots(self, first):
        """A worker of continuous batching (see the module docstring). Its
        searches hand the sentences that end to `handed`, from inside their
        loops; a thread of its own turns them into answers and settles them
        (`_answer`), since TensorFlow cannot be called from there."""
        searches = {1: first}  # n_best -> this worker's SlotTranslator
        live = set()  # this worker's sentences in its slots, until answered
        handed = queue.SimpleQueue()  # (search, ended, since); None: stop
        answering = threading.Thread(target=self._answer, args=(handed, live),
                                     name=f"{threading.current_thread().name}-answers")
        answering.start()
        try:
            while (taken := self._admit(searches, live)) is not None:
                for n_best, group in itertools.groupby(
                        sorted(taken, key=lambda item: item.n_best), key=lambda item: item.n_best):
                    group = list(group)
                    try:
                        searches[n_best].join([item.text for item in group], group)
                    except Exception as error:  # their requests' 500s; the worker carries on
                        self._settled(live, [(item, error, None) for item in group])
                        continue
                    with self._condition:
                        live.update(group)
                running = [search for search in searches.values() if search.live]
                for search in running:
                    since = [time.monotonic()]
                    try:
                        search.advance(SLOT_STEPS if len(running) > 1 else 2**30,
                                       on_ended=lambda ended, search=search, since=since:
                                       handed.put((search, ended, since)))
                    except Exception as error:  # the requests' 500s; the worker carries on
                        failed = search.keys
                        with self._condition:
                            self._slot_translators.remove(search)
                        searches[search.n_best] = self._slot_translator(search.n_best)
                        self._settled(live, [(item, error, None) for item in failed])
                    search.wakeup.recalled()
                # A client that went away: its sentences leave their slots.
                with self._condition:
                    gone = [item for item in live if item.future.cancelled()]
                for n_best, search in searches.items():
                    cancelled = search.cancel([item for item in gone if item.n_best == n_best])
                    self._settled(live, [(item, None, None) for item in cancelled])
        finally:
            handed.put(None)
            answering.join()

    def _answer(self, handed, live):
        """Answers what a worker's searches hand over, until told to stop."""
        while (found := handed.get()) is not None:
            search, ended, since = found
            try:
                answers = search.answers(ended)
            except Exception as error:
                answers = [(key, error, None) for key, *_ in ended]
            self._settled(live, answers, since)

    def _settled(self, live, ended, since=None):
        """Answers the sentences that `ended` (`(item, hypotheses or an
        error, _)` each) and takes them out of `live`; `since`: a list
        holding when the search started or last settled some (metrics)."""
        if not ended:
            return
        with self._condition:
            self._translating -= len(ended)
            live.difference_update(item for item, _, _ in ended)
            self._condition.notify_all()
        for item, result, _ in ended:
            if isinstance(result, Exception):
                item.loop.call_soon_threadsafe(_settle, item.future, None, result)
            elif result is not None:
                item.loop.call_soon_threadsafe(_settle, item.future, result, None)
        if self.observe is not None and since is not None:
            now = time.monotonic()
            self.observe(len(ended), sum(item.tokens for item, _, _ in ended), now - since[0])
            since[0] = now


def _settle(future, result, error):
    if future.cancelled():  # the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)

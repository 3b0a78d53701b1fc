"""Documents translated in the background, as DeepL's API translates them:
a file is handed in and gets an id and a key; its status is asked for
until it is done; its result is fetched once, and then forgotten.

The jobs wait in a bounded queue (`max_jobs` handed in and not yet
fetched, else a 429; one finished and not fetched within `kept_seconds`
is forgotten) and are translated one at a time, each through
`Service.translate_file`, so that their sentences join the model's batches
beside the interactive requests rather than crowd them out. A job belongs
to the owner who handed it in (`glossary_store.GlossaryStore.owner`):
asked for by another, it is not found, whatever id and key are sent. Jobs
live in the server process's memory: a restart forgets them (DeepL's
clients then see 404 and hand the file in again).
"""

import asyncio
import dataclasses
import logging
import os
import secrets
import time
import uuid

from keras_transformer.serving.errors import Refused

LOG = logging.getLogger("keras_transformer.serving")


@dataclasses.dataclass
class Job:
    """A document handed in: what to translate it with, and how far it is.

    `status` is DeepL's: queued, translating, done or error (then
    `error_message` says why); `stored` names the translated file in the
    service's files once done; `billed_characters` counts its text;
    `owner` is who handed it in (None: the server's one tenant)."""

    document_id: str
    document_key: str
    owner: str
    name: str
    data: bytes
    source: str
    target: str
    glossary: object
    on_done: object
    status: str = "queued"
    stored: str = None
    billed_characters: int = 0
    error_message: str = None
    finished: float = None


class DocumentJobs:
    """The documents of one server, translated by `service` (a
    `service.Service`) one after another."""

    def __init__(self, service, max_jobs=32, kept_seconds=3600):
        self.service, self.max_jobs, self.kept_seconds = service, max_jobs, kept_seconds
        self._jobs = {}
        self._queue = asyncio.Queue()
        self._worker = None

    def start(self):
        self._worker = asyncio.get_running_loop().create_task(self._work())

    async def stop(self):
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)

    def submit(self, name, data, source, target, glossary=None, on_done=None, owner=None):
        """Queues the file `name` of bytes `data` for translation from
        `source` ("auto": detected) into `target`, obeying `glossary`, for
        `owner`; `on_done(characters)` is called once it is translated.
        Returns the `Job`."""
        now = time.monotonic()
        for old in [job for job in self._jobs.values()
                    if job.finished is not None and now - job.finished > self.kept_seconds]:
            del self._jobs[old.document_id]
        if len(self._jobs) >= self.max_jobs:
            raise Refused(429, f"Too many documents: this server holds {self.max_jobs} at once "
                               "(translating, or done and not yet fetched); try again later")
        job = Job(uuid.uuid4().hex.upper(), secrets.token_hex(32).upper(), owner, name, data,
                  source, target, glossary, on_done)
        self._jobs[job.document_id] = job
        self._queue.put_nowait(job)
        return job

    def job(self, document_id, document_key, owner=None):
        """The job `document_id` if `document_key` is its key and `owner`
        handed it in, else a 404 (the same for each)."""
        job = self._jobs.get(document_id)
        if job is None or job.owner != owner or not isinstance(document_key, str) or \
                not secrets.compare_digest(job.document_key, document_key):
            raise Refused(404, "Document not found (its id and key do not match a document "
                               "here, or its result was fetched already)")
        return job

    def result(self, document_id, document_key, owner=None):
        """`(file name, bytes)` of `owner`'s done job, which is then
        forgotten (a second fetch is a 404); a 503 while it is not done."""
        job = self.job(document_id, document_key, owner)
        if job.status != "done":
            raise Refused(503, "Document translation is not done"
                               + (f": {job.error_message}" if job.error_message else ""))
        path = self.service.stored_file(job.stored)
        with open(path, "rb") as file:
            data = file.read()
        os.remove(path)
        del self._jobs[document_id]
        return job.name, data

    async def _work(self):
        while True:
            job = await self._queue.get()
            job.status = "translating"
            try:
                job.stored, job.billed_characters = await self.service.translate_file(
                    job.name, job.data, job.source, job.target, job.glossary)
                job.status = "done"
                if job.on_done is not None:
                    job.on_done(job.billed_characters)
            except Refused as refusal:
                job.status, job.error_message = "error", refusal.message
            except Exception as error:  # the server's own fault: logged, the job failed
                LOG.exception("Fault while translating the document %s", job.name)
                job.status, job.error_message = "error", f"Internal error: {type(error).__name__}"
            finally:
                job.data, job.finished = None, time.monotonic()

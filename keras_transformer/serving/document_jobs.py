"""Documents translated in the background, as DeepL's API translates them:
a file is handed in and gets an id and a key; its status is asked for
until it is done; its result is fetched once, and then forgotten.

The jobs are kept on disk, in a folder that replicas share and a restart
finds again (`folders.LockedFolder`: each file written whole, changes
under the folder's lock): for each job, `<id>.json` (what to translate it
with, its status, its owner and the SHA-256 of its document key, never the
key), `<id>.upload` (the file handed in, until it is translated) and
`<id>.result` (the translation, until it is fetched). A job handed in to
one replica is polled and fetched from any other, and one handed in
before a restart is there after it.

Every server process translates the folder's jobs one at a time, oldest
first, whichever replica they were handed in to, each through
`Service.translate_file`, so that their sentences join the model's batches
beside the interactive requests rather than crowd them out. A process
translating a job holds an exclusive lock on its upload (`fcntl.flock`),
which the kernel releases when the process ends: a job a replica left
"translating" (stopped by SIGTERM in the middle, or crashed) is taken up
again by the next process that looks, every `POLL_SECONDS` and at once
after a hand-in, the same server after its restart included.

The folder is bounded: at most `max_jobs` handed in and not yet fetched,
of every replica (a 429 beyond); one finished and not fetched within
`kept_seconds` is forgotten. A job belongs to the owner who handed it in
(`glossary_store.GlossaryStore.owner`): asked for by another, it is not
found, whatever id and key are sent.
"""

import asyncio
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import time
import uuid

from keras_transformer.serving.errors import Refused
from keras_transformer.serving.folders import LockedFolder

LOG = logging.getLogger("keras_transformer.serving")

POLL_SECONDS = 1.0
"""How often an idle process looks for jobs it was not handed (another
replica's, or one a stopped process left)."""

UNFINISHED = ("queued", "translating")

_ID = re.compile(r"[0-9A-F]{32}")

NOT_FOUND = ("Document not found (its id and key do not match a document here, or its result "
             "was fetched already)")


@dataclasses.dataclass
class Job:
    """A document handed in, as its `<id>.json` keeps it: what to translate
    it with, and how far it is.

    `status` is DeepL's: queued, translating, done or error (then
    `error_message` says why); `billed_characters` counts its text once
    done; `owner` is who handed it in (None: the server's one tenant);
    `key_digest` the SHA-256 of its document key; `glossary_id` the
    owner's glossary it obeys (None: none); `created` and `finished` are
    times (`time.time`)."""

    document_id: str
    key_digest: str
    owner: str
    name: str
    source: str
    target: str
    glossary_id: str = None
    status: str = "queued"
    billed_characters: int = 0
    error_message: str = None
    created: float = 0.0
    finished: float = None


def _digest(document_key):
    """What is kept of a document key: its SHA-256 (the key is 256 random
    bits, beyond any guessing)."""
    return hashlib.sha256(document_key.encode("utf-8")).hexdigest()


class DocumentJobs:
    """The documents of the server processes sharing `folder` (created if
    missing), translated by `service` (a `service.Service`).

    `glossary(glossary_id, source, target, owner)` gives the compiled
    glossary a job obeys (`GlossaryStore.compiled`, a `Refused` where it
    is gone); `count(owner, characters)` counts a translated document's
    characters in its owner's usage."""

    def __init__(self, service, folder, glossary, count, max_jobs=32, kept_seconds=3600):
        self.service, self.max_jobs, self.kept_seconds = service, max_jobs, kept_seconds
        self._folder = LockedFolder(folder)
        self._glossary, self._count = glossary, count
        self._wake = None
        self._worker = None
        self._claiming = None  # the worker's last look for a job (`_claim`, on a thread)

    def start(self):
        self._wake = asyncio.Event()
        self._worker = asyncio.get_running_loop().create_task(self._work())

    async def stop(self):
        """Ends the worker; a job it was translating stays "translating",
        for the next process to take up (its claim released here, also one
        made by a look that ran on while the worker was stopped)."""
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        if self._claiming is not None:
            claimed = (await asyncio.gather(self._claiming, return_exceptions=True))[0]
            if isinstance(claimed, tuple):
                claimed[1].close()

    # ------------------------------------------------------------ the folder

    def _path(self, document_id, suffix):
        return os.path.join(self._folder.path, document_id + suffix)

    def _read(self, document_id):
        """The job `document_id` as its file holds it, or None."""
        try:
            with open(self._path(document_id, ".json"), encoding="utf-8") as file:
                return Job(**json.load(file))
        except FileNotFoundError:
            return None

    def _write(self, job):
        self._folder.replace(self._path(job.document_id, ".json"),
                             json.dumps(dataclasses.asdict(job)).encode("utf-8"))

    def _jobs(self):
        """Every job of the folder (those removed meanwhile left out)."""
        ids = [name[:-len(".json")] for name in os.listdir(self._folder.path)
               if name.endswith(".json") and _ID.fullmatch(name[:-len(".json")])]
        return [job for job in map(self._read, ids) if job is not None]

    def _forget(self, document_id):
        """Removes a job's files, its status first (the caller holds the
        lock)."""
        for suffix in (".json", ".upload", ".result"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path(document_id, suffix))

    # ------------------------------------------------------------ the API's calls

    async def submit(self, name, data, source, target, glossary_id=None, owner=None):
        """Queues the file `name` of bytes `data` for translation from
        `source` ("auto": detected) into `target`, obeying `owner`'s
        glossary `glossary_id`, for `owner`. Returns `(document id,
        document key)`."""
        document_key = secrets.token_hex(32).upper()
        job = Job(uuid.uuid4().hex.upper(), _digest(document_key), owner, name, source, target,
                  glossary_id, created=time.time())
        await asyncio.to_thread(self._hand_in, job, data)
        self._wake.set()
        return job.document_id, document_key

    def _hand_in(self, job, data):
        """Writes a new job, its upload first (a status never names a
        missing upload), once the jobs kept too long are forgotten; a 429
        where the folder holds `max_jobs`."""
        with self._folder.changing():
            kept = []
            for old in self._jobs():
                if old.finished is not None and job.created - old.finished > self.kept_seconds:
                    self._forget(old.document_id)
                else:
                    kept.append(old)
            if len(kept) >= self.max_jobs:
                raise Refused(429, f"Too many documents: this server holds {self.max_jobs} at "
                                   "once (translating, or done and not yet fetched); try again "
                                   "later")
            self._folder.replace(self._path(job.document_id, ".upload"), data)
            self._write(job)

    def job(self, document_id, document_key, owner=None):
        """The job `document_id` if `document_key` is its key and `owner`
        handed it in, else a 404 (the same for each)."""
        found = (self._read(document_id)
                 if isinstance(document_id, str) and _ID.fullmatch(document_id) else None)
        if found is None or found.owner != owner or not isinstance(document_key, str) or \
                not secrets.compare_digest(found.key_digest, _digest(document_key)):
            raise Refused(404, NOT_FOUND)
        return found

    async def result(self, document_id, document_key, owner=None):
        """`(file name, bytes)` of `owner`'s done job, which is then
        forgotten (a second fetch, from any replica, is a 404); a 503 while
        it is not done."""
        return await asyncio.to_thread(self._take, document_id, document_key, owner)

    def _take(self, document_id, document_key, owner):
        with self._folder.changing():
            job = self.job(document_id, document_key, owner)
            if job.status != "done":
                raise Refused(503, "Document translation is not done"
                                   + (f": {job.error_message}" if job.error_message else ""))
            with open(self._path(document_id, ".result"), "rb") as file:
                data = file.read()
            self._forget(document_id)
        return job.name, data

    # ------------------------------------------------------------ translating

    async def _work(self):
        """Translates the folder's jobs, one at a time, as long as the
        server runs."""
        while True:
            self._wake.clear()
            self._claiming = asyncio.ensure_future(asyncio.to_thread(self._claim))
            try:  # (shielded: a claim made as the worker is stopped is released by `stop`)
                claimed = await asyncio.shield(self._claiming)
            except Exception:  # (the folder unreadable for a while: logged, tried again)
                LOG.exception("Fault while looking for documents to translate")
                claimed = None
            if claimed is None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
                continue
            job, upload = claimed
            try:
                await self._translate(job, upload)
            finally:
                upload.close()  # (the claim's lock with it)

    def _claim(self):
        """The oldest unfinished job no process is translating, claimed:
        `(the job, its upload, open and locked)`, its status "translating";
        None where there is none."""
        for job in sorted((job for job in self._jobs() if job.status in UNFINISHED),
                          key=lambda job: job.created):
            try:
                upload = open(self._path(job.document_id, ".upload"), "rb")
            except FileNotFoundError:  # finished or fetched meanwhile
                continue
            try:
                fcntl.flock(upload, fcntl.LOCK_EX | fcntl.LOCK_NB)
                claimed = self._start(job.document_id)
            except BlockingIOError:  # another process is translating it
                claimed = None
            except BaseException:
                upload.close()
                raise
            if claimed is not None:
                return claimed, upload
            upload.close()
        return None

    def _start(self, document_id):
        """The job, its status now "translating", if it is still
        unfinished; else None."""
        with self._folder.changing():
            job = self._read(document_id)
            if job is None or job.status not in UNFINISHED:
                return None
            job.status = "translating"
            self._write(job)
            return job

    async def _translate(self, job, upload):
        """Translates a claimed job and writes its result and status, or
        its error: a `Refused`'s line, or for a fault of the server's own
        its class (logged with its traceback)."""
        try:
            data = await asyncio.to_thread(upload.read)
            glossary = (await asyncio.to_thread(self._glossary, job.glossary_id, job.source,
                                                job.target, job.owner)
                        if job.glossary_id else None)
            output, characters = await self.service.translate_file(
                job.name, data, job.source, job.target, glossary)
        except Refused as refusal:
            await asyncio.to_thread(self._finish, job, error=refusal.message)
        except Exception as error:  # the server's own fault: logged, the job failed
            LOG.exception("Fault while translating the document %s", job.name)
            await asyncio.to_thread(self._finish, job, error=f"Internal error: "
                                                             f"{type(error).__name__}")
        else:
            await asyncio.to_thread(self._finish, job, output, characters)

    def _finish(self, job, output=None, characters=0, error=None):
        """Writes a job's result and its status "done" (its characters then
        counted), or "error" with `error`; its upload goes."""
        with self._folder.changing():
            current = self._read(job.document_id)
            if current is None:
                return
            if error is None:
                self._folder.replace(self._path(job.document_id, ".result"), output)
            current.status = "done" if error is None else "error"
            current.billed_characters, current.error_message = characters, error
            current.finished = time.time()
            self._write(current)
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path(job.document_id, ".upload"))
        if error is None:
            self._count(job.owner, characters)

"""A folder that server processes share (replicas on one volume, and the
same server after a restart): what DeepL's API keeps there, its glossaries
(`glossary_store`), documents (`document_jobs`) and usage (`usage`), is
written so that no reader and no restart ever sees part of a file.

Each file is written whole to a temporary name in the folder (`.tmp-...`),
flushed to the disk and renamed over the old one (`os.replace`: atomic on
one file system), so a reader, or a restart after SIGTERM or a crash in
the middle of a write, finds the old file or the new one. Changes are
serialised by an advisory lock on the folder's `.lock` file
(`fcntl.flock`), across processes as within one (a thread lock first,
since one process's threads share its flock). A folder opened removes the
temporary files a write cut short left, under the lock, so that a live
write of another process is never among them.
"""

import contextlib
import fcntl
import os
import tempfile
import threading


class LockedFolder:
    """The folder `path` (created if missing), its changes serialised by
    `changing` and its files written whole by `replace`."""

    def __init__(self, path):
        self.path = path
        os.makedirs(path, exist_ok=True)
        self._lock = threading.Lock()
        with self.changing():  # what a write cut short by a signal left (not a live write's)
            for entry in os.scandir(path):
                if entry.name.startswith(".tmp-"):
                    with contextlib.suppress(OSError):
                        os.remove(entry.path)

    @contextlib.contextmanager
    def changing(self):
        """Holds the folder's lock (this process's threads, then every
        process's)."""
        with self._lock, open(os.path.join(self.path, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def replace(self, path, data):
        """Writes the bytes `data` to `path` (in this folder or one below it):
        whole, or not at all. The caller holds the lock (`changing`), so
        that a process opening the folder meanwhile leaves the temporary
        file alone."""
        handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=self.path)
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(temporary)
            raise

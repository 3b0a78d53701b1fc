"""The glossaries clients keep on the server through DeepL's API (v2
glossaries and v3 multilingual ones), stored on disk so that they outlast
a restart and are shared by every server process that points at the same
folder (replicas on one volume).

Each glossary is one JSON file, `<glossary_id>.json`: its name, its
creation time and its dictionaries (a language pair and its entries each,
as sent). A file is written whole to a temporary name in the folder and
renamed over the old (`os.replace`: atomic on one file system), so a
reader, or a restart after SIGTERM in the middle of a write, sees the old
glossary or the new one, never part of one. Changes are serialised by an
advisory lock on the folder's `.lock` file (`fcntl.flock`), across
processes as within one. Reads go to the disk every time (a directory
listing, a file read, or for a translation the file's version alone), so
one replica sees what another wrote; the compiled `glossary.Glossary` of
a dictionary is kept for each version of its file.

The folder is bounded: at most `max_glossaries` glossaries, each with at
most `max_entries` entries in all.
"""

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import re
import tempfile
import threading
import uuid

from keras_transformer.glossary import Glossary, GlossaryError, parse_entries
from keras_transformer.serving.errors import Refused

_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclasses.dataclass
class Dictionary:
    """One language pair of a glossary and its entries, `(source, target)`
    strings in the order sent (a term's forms joined by `|`)."""

    source: str
    target: str
    entries: list


@dataclasses.dataclass
class StoredGlossary:
    """A glossary as stored: `glossary_id`, `name`, `creation_time` (DeepL's
    form, ISO 8601 with microseconds and a zone) and its `Dictionary`s."""

    glossary_id: str
    name: str
    creation_time: str
    dictionaries: list

    def dictionary(self, source, target):
        """The dictionary of `source` -> `target`, or None."""
        return next((found for found in self.dictionaries
                     if (found.source, found.target) == (source, target)), None)


def read_dictionary(entries, entries_format, source, target):
    """A `Dictionary` of `entries` (str, `entries_format` "tsv" or "csv",
    as DeepL takes them), or a 400 naming the line of a mistake."""
    if entries_format not in ("tsv", "csv"):
        raise Refused(400, f"Unsupported entries_format {str(entries_format)[:20]!r}; give tsv "
                           "or csv")
    if not isinstance(entries, str) or not entries.strip():
        raise Refused(400, "Missing or empty entries")
    try:
        found = parse_entries(entries, entries_format, source, target, name="the entries")
        pairs = [("|".join(entry.sources), "|".join(entry.targets)) for entry in found]
        Glossary.of(pairs, source, name="the entries")  # two targets for one term: refused
    except GlossaryError as error:
        raise Refused(400, f"Invalid glossary entries: {error}") from None
    return Dictionary(source, target, pairs)


def now():
    """The time as DeepL writes a glossary's `creation_time`."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


class GlossaryStore:
    """The glossaries in `folder` (created if missing)."""

    def __init__(self, folder, max_glossaries=1000, max_entries=100000):
        self.folder, self.max_glossaries, self.max_entries = folder, max_glossaries, max_entries
        os.makedirs(folder, exist_ok=True)
        self._lock = threading.Lock()
        self._compiled = {}  # (id, source, target) -> (the file's version, Glossary)
        for entry in os.scandir(folder):  # what a write cut short by a signal left
            if entry.name.startswith(".tmp-"):
                with contextlib.suppress(OSError):
                    os.remove(entry.path)

    def _path(self, glossary_id):
        return os.path.join(self.folder, f"{glossary_id}.json")

    @contextlib.contextmanager
    def _changing(self):
        """Holds the folder's lock (threads, then processes)."""
        with self._lock, open(os.path.join(self.folder, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, glossary):
        data = json.dumps({"glossary_id": glossary.glossary_id, "name": glossary.name,
                           "creation_time": glossary.creation_time,
                           "dictionaries": [dataclasses.asdict(found)
                                            for found in glossary.dictionaries]},
                          ensure_ascii=False).encode("utf-8")
        handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=self.folder)
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self._path(glossary.glossary_id))
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(temporary)
            raise

    def _check_size(self, dictionaries):
        count = sum(len(found.entries) for found in dictionaries)
        if count > self.max_entries:
            raise Refused(413, f"The glossary's {count} entries are more than this server keeps "
                               f"in one glossary ({self.max_entries})")

    def get(self, glossary_id):
        """The glossary `glossary_id`, or a 404."""
        path = self._path(glossary_id)
        if not _ID.fullmatch(glossary_id or ""):
            raise Refused(404, "Glossary not found")
        try:
            with open(path, encoding="utf-8") as file:
                stored = json.load(file)
        except FileNotFoundError:
            raise Refused(404, "Glossary not found") from None
        return StoredGlossary(stored["glossary_id"], stored["name"], stored["creation_time"],
                              [Dictionary(found["source"], found["target"],
                                          [tuple(pair) for pair in found["entries"]])
                               for found in stored["dictionaries"]])

    def list(self):
        """Every glossary, oldest first."""
        found = []
        for entry in os.scandir(self.folder):
            name, extension = os.path.splitext(entry.name)
            if extension == ".json" and _ID.fullmatch(name):
                with contextlib.suppress(Refused):  # deleted since the listing
                    found.append(self.get(name))
        return sorted(found, key=lambda glossary: glossary.creation_time)

    def create(self, name, dictionaries):
        """Stores a new glossary of `dictionaries` named `name`."""
        self._check_size(dictionaries)
        with self._changing():
            count = sum(1 for entry in os.scandir(self.folder) if entry.name.endswith(".json"))
            if count >= self.max_glossaries:
                raise Refused(456, f"This server keeps {self.max_glossaries} glossaries at "
                                   "most; delete one first")
            glossary = StoredGlossary(str(uuid.uuid4()), name, now(), list(dictionaries))
            self._write(glossary)
        return glossary

    def update(self, glossary_id, name=None, dictionaries=(), replace=False):
        """Renames the glossary (`name`) and merges `dictionaries` into it:
        a pair's entries added to (or, with `replace`, replacing) its own."""
        with self._changing():
            glossary = self.get(glossary_id)
            if name is not None:
                glossary.name = name
            for new in dictionaries:
                old = glossary.dictionary(new.source, new.target)
                if old is None:
                    glossary.dictionaries.append(new)
                elif replace:
                    old.entries = new.entries
                else:
                    merged = dict(old.entries)
                    merged.update(new.entries)
                    old.entries = list(merged.items())
            self._check_size(glossary.dictionaries)
            self._write(glossary)
        return glossary

    def remove_dictionary(self, glossary_id, source, target):
        """Removes one language pair of the glossary (a 404 if it has none)."""
        with self._changing():
            glossary = self.get(glossary_id)
            if glossary.dictionary(source, target) is None:
                raise Refused(404, f"The glossary has no dictionary from {source} to {target}")
            glossary.dictionaries = [found for found in glossary.dictionaries
                                     if (found.source, found.target) != (source, target)]
            self._write(glossary)

    def delete(self, glossary_id):
        """Deletes the glossary, or a 404."""
        with self._changing():
            self.get(glossary_id)
            os.remove(self._path(glossary_id))

    def compiled(self, glossary_id, source, target):
        """The `glossary.Glossary` of the glossary's `source` -> `target`
        dictionary, which the search obeys, compiled once for each version
        of its file (a request reads only the file's time when it has not
        changed); a 404 for an unknown id, a 400 for a glossary without that
        pair."""
        if not _ID.fullmatch(glossary_id or ""):
            raise Refused(404, "Glossary not found")
        try:  # a write is a new file (`os.replace`): its inode tells versions apart
            found = os.stat(self._path(glossary_id))
        except FileNotFoundError:
            raise Refused(404, "Glossary not found") from None
        stamp = (found.st_ino, found.st_mtime_ns, found.st_size)
        cached = self._compiled.get((glossary_id, source, target))
        if cached and cached[0] == stamp:
            return cached[1]
        glossary = self.get(glossary_id)
        found = glossary.dictionary(source, target)
        if found is None:
            pairs = ", ".join(f"{other.source}-{other.target}" for other in glossary.dictionaries)
            raise Refused(400, f"Glossary dictionary not found: the glossary's language pairs "
                               f"({pairs}) do not include {source}-{target}")
        compiled = Glossary.of(found.entries, source, name=f"glossary {glossary.name!r}")
        if len(self._compiled) >= 2 * self.max_glossaries:  # those deleted elsewhere, too
            self._compiled.clear()
        self._compiled[glossary_id, source, target] = (stamp, compiled)
        return compiled

"""The glossaries clients keep on the server through DeepL's API (v2
glossaries and v3 multilingual ones), stored on disk so that they outlast
a restart and are shared by every server process that points at the same
folder (replicas on one volume).

Each glossary is one JSON file, `<glossary_id>.json`: its name, its
creation time and its dictionaries (a language pair and its entries each,
as sent), written whole and changed under the folder's lock
(`folders.LockedFolder`), so a reader, or a restart after SIGTERM in the
middle of a write, sees the old glossary or the new one, never part of
one, and replicas change it one at a time. Reads go to the disk every
time (a directory listing, a file read, or for a translation the file's
version alone), so one replica sees what another wrote; the compiled
`glossary.Glossary` of a dictionary is kept for each version of its file.

A glossary belongs to its owner, as on DeepL it belongs to the account
that made it: it is kept in the owner's subfolder, named by `owner(key)`,
a digest of the API key (scrypt with a random salt kept in the folder's
`.salt`, so that the folder holds no key, replicas on it name a key
alike, and guessing a short key from the folder costs a scrypt a guess),
or `ANONYMOUS` for the requests without a key. An owner reaches its own
glossaries and the shared ones, those in the folder itself: what a server
without `--api-keys` keeps, and every glossary written before glossaries
had owners (`assign` gives them to one owner). Any other id, another
owner's included, is not found.

The folder is bounded: at most `max_glossaries` glossaries in all and
`max_per_owner` of each owner, each with at most `max_entries` entries.
"""

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import re
import uuid

from keras_transformer.glossary import Glossary, GlossaryError, parse_entries
from keras_transformer.serving.errors import Refused
from keras_transformer.serving.folders import LockedFolder

_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

ANONYMOUS = "anonymous"
"""The owner of what requests without a key keep (`--api-keys-optional`):
one tenant, apart from every key (a key's digest is 64 hex digits)."""

SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
"""scrypt's cost for a key's digest: 16 MiB and about 60 ms (a 2-core
Zen 3), paid once a key by each server process, and by a guesser for each
guess."""


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
    form, ISO 8601 with microseconds and a zone), its `Dictionary`s, and
    its `owner` (the subfolder it is kept in; None: shared)."""

    glossary_id: str
    name: str
    creation_time: str
    dictionaries: list
    owner: str = None

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

    def __init__(self, folder, max_glossaries=1000, max_entries=100000, max_per_owner=None):
        self.folder, self.max_glossaries, self.max_entries = folder, max_glossaries, max_entries
        self.max_per_owner = max_per_owner or max_glossaries
        self._folder = LockedFolder(folder)
        self._compiled = {}  # (path, source, target) -> (the file's version, Glossary)
        self._owners = {}  # key -> owner(key), for the keys a server lets in

    def _path(self, glossary_id, owner=None):
        return os.path.join(self.folder, *([owner] if owner else []), f"{glossary_id}.json")

    def _ids(self, owner=None):
        """The ids of the glossaries kept in `owner`'s subfolder (None: the
        shared ones)."""
        try:
            names = os.listdir(os.path.join(self.folder, owner) if owner else self.folder)
        except FileNotFoundError:  # an owner who has kept none yet
            return []
        return [name[:-5] for name in names
                if name.endswith(".json") and _ID.fullmatch(name[:-5])]

    def _owners_on_disk(self):
        """The owners with a subfolder (each key that has kept a glossary)."""
        return [entry.name for entry in os.scandir(self.folder)
                if entry.is_dir() and not entry.name.startswith(".")]

    def _write(self, glossary):
        if glossary.owner:
            os.makedirs(os.path.join(self.folder, glossary.owner), exist_ok=True)
        self._folder.replace(self._path(glossary.glossary_id, glossary.owner), json.dumps(
            {"glossary_id": glossary.glossary_id, "name": glossary.name,
             "creation_time": glossary.creation_time,
             "dictionaries": [dataclasses.asdict(found) for found in glossary.dictionaries]},
            ensure_ascii=False).encode("utf-8"))

    def owner(self, key):
        """The owner an API key's glossaries are kept under: the hex scrypt
        digest of `key` with the folder's salt (made by the first server
        that needs it), computed once a key. The salt makes a key's digest
        differ from one folder to another, so no table computed in advance
        serves, and scrypt's cost makes each guess at a key slow."""
        found = self._owners.get(key)
        if found is None:
            found = self._owners[key] = hashlib.scrypt(key.encode("utf-8"), salt=self._salt(),
                                                       **SCRYPT).hex()
        return found

    def _salt(self):
        """The folder's salt (32 random bytes in `.salt`), written by the
        first process that needs it, under the lock, so that every replica
        reads the same."""
        path = os.path.join(self.folder, ".salt")
        with self._folder.changing():
            try:
                with open(path, "rb") as file:
                    return file.read()
            except FileNotFoundError:
                salt = os.urandom(32)
                self._folder.replace(path, salt)
                return salt

    def _check_size(self, dictionaries):
        count = sum(len(found.entries) for found in dictionaries)
        if count > self.max_entries:
            raise Refused(413, f"The glossary's {count} entries are more than this server keeps "
                               f"in one glossary ({self.max_entries})")

    def _paths(self, glossary_id, owner):
        """Where the glossary `glossary_id` may be that `owner` reaches: in
        its subfolder, then among the shared ones; a 404 for an id that
        cannot be one."""
        if not isinstance(glossary_id, str) or not _ID.fullmatch(glossary_id):
            raise Refused(404, "Glossary not found")
        return [(owner, self._path(glossary_id, owner)), (None, self._path(glossary_id))] \
            if owner else [(None, self._path(glossary_id))]

    def get(self, glossary_id, owner=None):
        """The glossary `glossary_id`, `owner`'s or shared, or a 404 (for
        another owner's too: nothing tells it from an unknown id)."""
        for kept_by, path in self._paths(glossary_id, owner):
            try:
                with open(path, encoding="utf-8") as file:
                    stored = json.load(file)
            except FileNotFoundError:
                continue
            return StoredGlossary(stored["glossary_id"], stored["name"], stored["creation_time"],
                                  [Dictionary(found["source"], found["target"],
                                              [tuple(pair) for pair in found["entries"]])
                                   for found in stored["dictionaries"]], kept_by)
        raise Refused(404, "Glossary not found")

    def list(self, owner=None):
        """`owner`'s glossaries and the shared ones, oldest first."""
        found = []
        for glossary_id in self._ids(owner) + (self._ids() if owner else []):
            with contextlib.suppress(Refused):  # deleted since the listing
                found.append(self.get(glossary_id, owner))
        return sorted(found, key=lambda glossary: glossary.creation_time)

    def create(self, name, dictionaries, owner=None):
        """Stores a new glossary of `dictionaries` named `name`, `owner`'s
        (None: shared); a 456 where the folder, or the owner's share of it,
        is full."""
        self._check_size(dictionaries)
        with self._folder.changing():
            if sum(len(self._ids(kept_by))
                   for kept_by in [None, *self._owners_on_disk()]) >= self.max_glossaries:
                raise Refused(456, f"This server keeps {self.max_glossaries} glossaries at "
                                   "most, of every key together, and is full")
            if len(self._ids(owner)) >= self.max_per_owner:
                raise Refused(456, f"This server keeps {self.max_per_owner} glossaries a key at "
                                   "most; delete one of yours first")
            glossary = StoredGlossary(str(uuid.uuid4()), name, now(), list(dictionaries), owner)
            self._write(glossary)
        return glossary

    def update(self, glossary_id, name=None, dictionaries=(), replace=False, owner=None):
        """Renames the glossary (`name`) and merges `dictionaries` into it:
        a pair's entries added to (or, with `replace`, replacing) its own."""
        with self._folder.changing():
            glossary = self.get(glossary_id, owner)
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

    def remove_dictionary(self, glossary_id, source, target, owner=None):
        """Removes one language pair of the glossary (a 404 if it has none)."""
        with self._folder.changing():
            glossary = self.get(glossary_id, owner)
            if glossary.dictionary(source, target) is None:
                raise Refused(404, f"The glossary has no dictionary from {source} to {target}")
            glossary.dictionaries = [found for found in glossary.dictionaries
                                     if (found.source, found.target) != (source, target)]
            self._write(glossary)

    def delete(self, glossary_id, owner=None):
        """Deletes the glossary, or a 404."""
        with self._folder.changing():
            glossary = self.get(glossary_id, owner)
            os.remove(self._path(glossary_id, glossary.owner))

    def shared(self):
        """How many glossaries are shared (kept without an owner)."""
        return len(self._ids())

    def assign(self, owner):
        """Gives every shared glossary to `owner` (moved into its
        subfolder, each by one rename); returns how many."""
        with self._folder.changing():
            moved = self._ids()
            if moved:
                os.makedirs(os.path.join(self.folder, owner), exist_ok=True)
            for glossary_id in moved:
                os.rename(self._path(glossary_id), self._path(glossary_id, owner))
        return len(moved)

    def compiled(self, glossary_id, source, target, owner=None):
        """The `glossary.Glossary` of the glossary's `source` -> `target`
        dictionary (`owner`'s or shared), which the search obeys, compiled
        once for each version of its file (a request reads only the file's
        time when it has not changed); a 404 for an id it does not reach, a
        400 for a glossary without that pair."""
        for _, path in self._paths(glossary_id, owner):
            try:  # a write is a new file (`os.replace`): its inode tells versions apart
                found = os.stat(path)
                break
            except FileNotFoundError:
                continue
        else:
            raise Refused(404, "Glossary not found")
        stamp = (found.st_ino, found.st_mtime_ns, found.st_size)
        cached = self._compiled.get((path, source, target))
        if cached and cached[0] == stamp:
            return cached[1]
        glossary = self.get(glossary_id, owner)
        found = glossary.dictionary(source, target)
        if found is None:
            pairs = ", ".join(f"{other.source}-{other.target}" for other in glossary.dictionaries)
            raise Refused(400, f"Glossary dictionary not found: the glossary's language pairs "
                               f"({pairs}) do not include {source}-{target}")
        compiled = Glossary.of(found.entries, source, name=f"glossary {glossary.name!r}")
        if len(self._compiled) >= 2 * self.max_glossaries:  # those deleted elsewhere, too
            self._compiled.clear()
        self._compiled[path, source, target] = (stamp, compiled)
        return compiled

"""Who may use the server and how much, by LibreTranslate's rules and flag
names: API keys (`--api-keys`, required or optional), each with its own
limits; requests a minute per key or address (`--req-limit`); and the
suggestions clients send (`--suggestions`), stored on disk, bounded.
"""

import dataclasses
import os
import sqlite3
import threading

from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from keras_transformer.serving.errors import Refused

NO_LIMIT = -1
"""LibreTranslate's value for a limit that is off."""


@dataclasses.dataclass(frozen=True)
class Key:
    """An API key's own limits (None: the server's)."""

    req_limit: int = None
    char_limit: int = None


def read_keys(path):
    """`{key: Key}` from `path`: one key a line, optionally followed by its
    requests a minute and its characters a text (`KEY [REQ_LIMIT
    [CHAR_LIMIT]]`, as LibreTranslate's key database holds them); blank
    lines and lines starting with # are skipped. A ValueError names the
    file and line of a mistake."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"Cannot read --api-keys {path}: {error}") from None
    keys = {}
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) > 3 or not all(word.isdigit() for word in words[1:]):
            raise ValueError(f"--api-keys {path}, line {number}: write KEY [REQ_LIMIT "
                             f"[CHAR_LIMIT]], the limits whole numbers; got {line.strip()!r}")
        keys[words[0]] = Key(*(int(word) for word in words[1:]))
    if not keys:
        raise ValueError(f"--api-keys {path} holds no key; write one key a line.")
    return keys


class RequestLimits:
    """Requests a minute per client (an API key, else the client's
    address), each key's own limit or `per_minute`, counted over a moving
    window by the `limits` library (what Flask-Limiter, LibreTranslate's
    limiter, counts with). As LibreTranslate counts: a request is let in
    while its client has any of the minute's budget left, and then costs
    what it asked for (a list of n texts, n), however it is answered."""

    def __init__(self, per_minute):
        self.per_minute = per_minute
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def _item(self, per_minute):
        limit = self.per_minute if per_minute is None else per_minute
        return None if limit == NO_LIMIT else RateLimitItemPerMinute(limit)

    def admit(self, client, per_minute=None):
        """Raises a 429 where `client` has spent its minute's requests."""
        item = self._item(per_minute)
        if item is not None and (item.amount == 0 or not self._limiter.test(item, client)):
            raise Refused(429, f"Slowdown: {item}")

    def spend(self, client, cost, per_minute=None):
        item = self._item(per_minute)
        if item is not None and cost > 0:  # what is left of the budget at most: the window full
            taken = min(cost, self._limiter.get_window_stats(item, client).remaining)
            if taken > 0:
                self._limiter.hit(item, client, cost=taken)


class Suggestions:
    """Suggested translations (`POST /suggest`), kept as LibreTranslate
    keeps them: an SQLite database with a table `suggestions (q, s,
    source, target)`. At most `max_count` are stored, each text at most
    `max_chars` characters, so a flood of suggestions cannot fill the
    disk. The standard library's sqlite3: several server processes may
    share the file."""

    def __init__(self, path, max_count=10000, max_chars=5000):
        self.path, self.max_count, self.max_chars = path, max_count, max_chars
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=10)
        self._db.execute('CREATE TABLE IF NOT EXISTS suggestions ("q" TEXT NOT NULL, "s" TEXT '
                         'NOT NULL, "source" TEXT NOT NULL, "target" TEXT NOT NULL)')
        self._db.commit()

    def add(self, q, s, source, target):
        """Stores one suggestion; a 400 for an overlong text, a 403 once
        `max_count` are stored."""
        for text in (q, s):
            if len(text) > self.max_chars:
                raise Refused(400, f"Invalid request: request ({len(text)}) exceeds text limit "
                                   f"({self.max_chars})")
        with self._lock:
            count, = self._db.execute("SELECT count(*) FROM suggestions").fetchone()
            if count >= self.max_count:
                raise Refused(403, f"Suggestions are full on this server ({count} stored); its "
                                   "operator must read them first")
            self._db.execute("INSERT INTO suggestions (q, s, source, target) VALUES (?, ?, ?, ?)",
                             (q, s, source, target))
            self._db.commit()

    def close(self):
        with self._lock:
            self._db.close()

"""The characters each tenant of DeepL's API has translated (`/v2/usage`,
`--char-quota`), kept on disk so that replicas on one folder count
together and a restart forgets nothing.

A tenant is an owner as `glossary_store` names it: a key's digest under
`--api-keys` (never the key), `ANONYMOUS` for the requests without one,
and `SERVER` where the server has one tenant (no `--api-keys`). Each
tenant's count is one JSON file, `<tenant>.json` (`{"character_count":
N}`), read and rewritten whole under the folder's lock
(`folders.LockedFolder`), so that two replicas charging at once both
count, and a quota is never overrun by their race.
"""

import json
import os

from keras_transformer.serving.errors import Refused
from keras_transformer.serving.folders import LockedFolder

SERVER = "server"
"""The tenant of a server without `--api-keys`."""


class Usage:
    """The counts kept in `folder` (created if missing); `quota` is the
    characters a tenant may translate (None: no quota)."""

    def __init__(self, folder, quota=None):
        self._folder = LockedFolder(folder)
        self.quota = quota

    def _path(self, owner):
        return os.path.join(self._folder.path, f"{owner or SERVER}.json")

    def count(self, owner):
        """The characters `owner` (None: the one tenant) has translated."""
        try:
            with open(self._path(owner), encoding="utf-8") as file:
                return json.load(file)["character_count"]
        except FileNotFoundError:
            return 0

    def charge(self, owner, characters, whatever_the_quota=False):
        """Adds `characters` to `owner`'s count, or, where that would take
        it over the quota, refuses with DeepL's 456 and counts nothing
        (`charge(owner, 0)` refuses a tenant already over it);
        `whatever_the_quota` counts them anyway (a document's, once it is
        translated)."""
        with self._folder.changing():
            used = self.count(owner)
            if self.quota is not None and used + characters > self.quota and \
                    not whatever_the_quota:
                raise Refused(456, "Quota for this billing period has been exceeded "
                                   f"({used} of {self.quota} characters used)")
            self._folder.replace(self._path(owner), json.dumps(
                {"character_count": used + characters}).encode())

"""The Ding German-English dictionary as a TFDS dataset (`ding_de_en`).

Debian's package `trans-de-en` installs the dictionary of TU Chemnitz
(Frank Richter, https://dict.tu-chemnitz.de/, GPL-2.0-or-later) as one file,
`/usr/share/trans/de-en`, a line per entry:

    Aalleiter {f}; Aaltreppe {f} (Wasserbau) | Aalleitern {pl} :: eel ladder (water engineering) | eel ladders

`::` separates German from English, `|` separates aligned sub-entries
(singular | plural, or headword | example phrases and sentences), `;`
separates synonyms, and `{...}`, `[...]`, `(...)`, `<...>` are annotations.
Each aligned sub-entry gives one pair: its first German and first English
synonym with the annotations removed (about 390,000 pairs, about 20,000 of them
whole sentences).

The split is a hash of the German side, so it is deterministic, and a German
phrase listed twice never lands in two splits: 95% train, 2% validation, 3%
test.
"""

import hashlib
import os
import re

import tensorflow_datasets as tfds

from keras_transformer.names import DING_PATH as DEFAULT_PATH
SPLIT_PERCENT = {"validation": range(0, 2), "test": range(2, 5), "train": range(5, 100)}
INSTALL_HINT = (
    "Install it with `sudo apt-get install trans-de-en` (Debian/Ubuntu), or "
    "pass the path of a file in the same format."
)
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\([^)]*\)|<[^>]*>")
_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+([.,!?;:])")


def clean(phrase):
    """First synonym of a sub-entry, annotations removed, spaces normalised."""
    text = _ANNOTATION.sub(" ", phrase.split(";")[0])
    return _SPACE_BEFORE_PUNCTUATION.sub(r"\1", " ".join(text.split()))


def parse_line(line):
    """The (german, english) pairs of one dictionary line; [] for comments."""
    if line.startswith("#") or " :: " not in line:
        return []
    german, english = line.rstrip("\n").split(" :: ", 1)
    german_parts, english_parts = german.split(" | "), english.split(" | ")
    if len(german_parts) != len(english_parts):
        return []
    pairs = [(clean(de), clean(en)) for de, en in zip(german_parts, english_parts)]
    return [(de, en) for de, en in pairs if de and en]


def split_of(german):
    """'train', 'validation' or 'test', from a hash of the German side."""
    bucket = int.from_bytes(hashlib.md5(german.encode("utf-8")).digest()[:4], "big") % 100
    return next(name for name, percents in SPLIT_PERCENT.items() if bucket in percents)


class DingDeEn(tfds.core.GeneratorBasedBuilder):
    """TFDS builder for the Ding German-English dictionary (see module docstring).

    `source_path` is the dictionary file, by default where `trans-de-en`
    installs it. The builder reads it once and writes TFDS records to
    `data_dir` like any other dataset, with a line of its own that says so
    (TFDS's would say it downloads).
    """

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First sub-entry synonyms, 95/2/3 hash split."}

    def __init__(self, *, source_path=DEFAULT_PATH, **kwargs):
        self.source_path = source_path
        super().__init__(**kwargs)

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            description=(
                "German-English phrase and sentence pairs from the Ding dictionary "
                "of TU Chemnitz (Frank Richter), as installed by Debian's package "
                "trans-de-en at /usr/share/trans/de-en. Source: "
                "https://dict.tu-chemnitz.de/. Licence: GNU GPL version 2 or later. "
                "One pair per aligned sub-entry (first synonym on each side, "
                "annotations removed); deterministic 95/2/3 train/validation/test "
                "split by a hash of the German side."
            ),
            features=tfds.features.Translation(languages=("de", "en")),
            supervised_keys=("de", "en"),
            homepage="https://dict.tu-chemnitz.de/",
            license="GPL-2.0-or-later",
        )

    def _log_download_bytes(self):
        """Says what preparing the records does, in place of TFDS's
        "Downloading and preparing dataset Unknown size ...", which reads as
        if something were downloaded: this reads a local file."""
        print(f"Preparing the Ding dictionary {self.source_path} as TFDS records in "
              f"{self.data_dir}; later runs reuse them.", flush=True)

    def _log_download_done(self):
        """Nothing, in place of TFDS's "Dataset ding_de_en downloaded and
        prepared to ...": `_log_download_bytes` said it."""

    def _split_generators(self, dl_manager):
        if not os.path.isfile(self.source_path):
            raise FileNotFoundError(
                f"The Ding dictionary file {self.source_path} does not exist. {INSTALL_HINT}"
            )
        return {split: self._generate_examples(split) for split in SPLIT_PERCENT}

    def _generate_examples(self, split):
        with open(self.source_path, encoding="utf-8") as lines:
            for line_number, line in enumerate(lines):
                for part, (de, en) in enumerate(parse_line(line)):
                    if split_of(de) == split:
                        yield f"{line_number}-{part}", {"de": de, "en": en}

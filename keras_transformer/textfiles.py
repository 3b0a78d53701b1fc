"""The text files of the commands: one set of rules for reading awkward
input, and output written whole or not at all. Plain Python (no
TensorFlow), so that the ONNX runner uses it too.

Reading (`read_lines`; `clean_text` applies the same rules to one string):
- Text is UTF-8. Bytes that are not valid UTF-8 become U+FFFD (the
  replacement character, which the tokenizers drop) and are reported.
- A UTF-8 byte-order mark at the start is dropped. A UTF-16 or UTF-32 one
  stops with an error that says how to convert the file.
- Lines end at LF; a CR before it (Windows line ends) is dropped.
- NUL bytes become spaces and are reported.
- Empty and blank lines are kept, so that output line i belongs to input
  line i; the last line need not end in LF.

Writing: `check_output` refuses an output path that exists (unless told to
replace it) or cannot be written, before any work is done; `replace_path`,
`replace_file` and `replace_folder` write into a temporary file or folder
beside the destination and move it into place only when the writing
finished, so that an error or Ctrl-C leaves any earlier output as it was.
"""

import codecs
import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile

_SURROGATES = re.compile("[\ud800-\udfff]")
_OTHER_UNICODE_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),  # before UTF-16: FF FE 00 00
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"),
)
STDIN = "standard input"


class TruncationWarning(UserWarning):
    """Input longer than the model accepts was cut to its length."""


def truncation_warning(indexes, limit):
    """The `TruncationWarning` for sentences `indexes` (counted from 0) of a
    batch, cut to `limit` tokens."""
    named = ", ".join(map(str, indexes[:10])) + (" ..." if len(indexes) > 10 else "")
    return TruncationWarning(f"{len(indexes)} sentence(s) ({named}, counted from 0) are longer "
                             f"than the model's {limit} tokens and were cut to that length.")


def clean_text(text):
    """A sentence from anywhere (str or bytes) as the text the model reads:
    invalid UTF-8 and lone surrogates (what Python makes of undecodable
    bytes in file names and arguments) become U+FFFD, NUL becomes a space."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8", errors="replace")
    else:
        text = _SURROGATES.sub("\ufffd", str(text))
    return text.replace("\0", " ")


@dataclasses.dataclass
class Lines:
    """The lines of a text file and what had to be repaired in them.

    `replaced` and `nul` are 1-based line numbers: lines with bytes that
    were not UTF-8 (now U+FFFD), and lines with NUL bytes (now spaces)."""

    name: str
    lines: list
    replaced: list = dataclasses.field(default_factory=list)
    nul: list = dataclasses.field(default_factory=list)

    def __len__(self):
        return len(self.lines)

    def warnings(self):
        """One sentence for each kind of repair, naming the lines."""
        notes = []
        if self.replaced:
            notes.append(f"{self.name}: {describe_lines(self.replaced)} had bytes that are not "
                         "UTF-8; they were replaced with U+FFFD")
        if self.nul:
            notes.append(f"{self.name}: {describe_lines(self.nul)} had NUL bytes; they were read "
                         "as spaces")
        return notes


def read_lines(path=None):
    """The lines of the UTF-8 text file `path` (standard input when None),
    under the rules in the module docstring.

    Raises:
        ValueError: the file cannot be read (missing, a folder, not
            readable) or is UTF-16 or UTF-32; the message names it.
    """
    name = STDIN if path is None else os.fspath(path)
    if path is None:
        data = sys.stdin.buffer.read()
    else:
        try:
            with open(path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            raise ValueError(f"{name} does not exist; check the path.") from None
        except IsADirectoryError:
            raise ValueError(f"{name} is a folder; give a text file, a sentence a line.") from None
        except PermissionError:
            raise ValueError(f"{name} cannot be read (permission denied); make it readable "
                             "(chmod u+r) or copy it.") from None
        except OSError as error:
            raise ValueError(f"{name} cannot be read: {error.strerror or error}.") from None
    check_unicode_mark(data, name, None if path is None else name)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()  # the end of the last line, or an empty file
    result = Lines(name, [])
    for number, line in enumerate(raw, start=1):
        text, replaced, nul = decode_line(line)
        if nul:
            result.nul.append(number)
        if replaced:
            result.replaced.append(number)
        result.lines.append(text)
    return result


def check_unicode_mark(start, name, path=None):
    """Raises a ValueError (naming `name` and saying how to convert it) if
    the bytes `start` of a file begin with a UTF-16 or UTF-32 byte-order
    mark; `path` is the file's path for the command shown (FILE if None)."""
    for mark, encoding in _OTHER_UNICODE_MARKS:
        if start.startswith(mark):
            target = path or "FILE"
            raise ValueError(f"{name} is {encoding} text (it starts with a {encoding} byte-order "
                             f"mark); convert it to UTF-8 first, e.g. iconv -f {encoding} -t UTF-8 "
                             f"{target} > {target}.utf8")


def decode_line(line):
    """One line's bytes (without its LF) under the rules in the module
    docstring: `(text, had bytes that are not UTF-8, had NUL bytes)`. A
    UTF-8 byte-order mark is the caller's to drop (it starts only a file)."""
    if line.endswith(b"\r"):
        line = line[:-1]
    nul = b"\0" in line
    if nul:
        line = line.replace(b"\0", b" ")
    try:
        return line.decode("utf-8"), False, nul
    except UnicodeDecodeError:
        return line.decode("utf-8", errors="replace"), True, nul


def describe_lines(numbers, shown=10):
    """`[3, 4, 5, 9]` -> "lines 3-5 and 9", for messages (at most `shown`
    ranges named, then how many lines more)."""
    ranges = []
    for number in sorted(set(numbers)):
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1][1] = number
        else:
            ranges.append([number, number])
    names = [str(a) if a == b else f"{a}-{b}" for a, b in ranges]
    if len(names) == 1 and ranges[0][0] == ranges[0][1]:
        return f"line {names[0]}"
    if len(names) > shown:
        rest = sum(b - a + 1 for a, b in ranges[shown:])
        return f"lines {', '.join(names[:shown])} and {rest} more"
    if len(names) == 1:
        return f"lines {names[0]}"
    return f"lines {', '.join(names[:-1])} and {names[-1]}"


def check_output(path, overwrite=False, folder=False, option="--overwrite"):
    """Refuses, before any work, an output that would replace something
    without being asked to, or that cannot be written.

    Args:
        path: the file (or, with `folder=True`, the folder) to be written.
        overwrite: an existing `path` may be replaced.
        folder: `path` is a folder; missing parents are then created later.
        option: what the user passes to allow replacing, for the message.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: `path` cannot be written (its parent is missing, not a
            folder, or not writable; or it is of the other kind).
    """
    path = os.path.abspath(os.fspath(path))
    if os.path.lexists(path):
        if not overwrite:
            raise FileExistsError(f"{path} exists; pass {option} to replace it, or choose "
                                  "another output path.")
        if os.path.isdir(path) != folder:
            raise ValueError(f"{path} is a {'file' if folder else 'folder'}; give a "
                             f"{'folder' if folder else 'file'} path.")
    parent = os.path.dirname(path)
    while folder and not os.path.exists(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)  # a folder's missing parents are created
    if not os.path.exists(parent):
        raise ValueError(f"Cannot write {path}: the folder {parent} does not exist; create it first.")
    if not os.path.isdir(parent):
        raise ValueError(f"Cannot write {path}: {parent} is not a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"Cannot write {path}: the folder {parent} is not writable "
                         "(permission denied).")
    return path


@contextlib.contextmanager
def replace_path(path):
    """Yields a temporary path beside `path` (same extension) to write; when
    the block ends normally it replaces `path`, otherwise it is removed and
    `path` keeps what it had. A file that is replaced keeps its permissions."""
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    stem, extension = os.path.splitext(name)
    handle, temporary = tempfile.mkstemp(prefix=f".{stem}.partial-", suffix=extension, dir=folder)
    os.close(handle)
    try:
        yield temporary
        if os.path.exists(path):
            mode = os.stat(path).st_mode & 0o7777
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


@contextlib.contextmanager
def replace_file(path, mode="w"):
    """`open(path, mode)` that replaces `path` only when the block ends
    normally (see `replace_path`). Text is written as UTF-8 with LF."""
    with replace_path(path) as temporary:
        encoding = None if "b" in mode else "utf-8"
        newline = None if "b" in mode else "\n"
        with open(temporary, mode, encoding=encoding, newline=newline) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())


@contextlib.contextmanager
def replace_folder(path, prefix=".partial-"):
    """Yields a new temporary folder beside `path` (created, with missing
    parents) to write; when the block ends normally it becomes `path`,
    whose earlier content is moved aside first and deleted only after the
    new folder is in place. On an error or Ctrl-C the temporary folder is
    removed and `path` keeps what it had."""
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        yield scratch
        if os.path.lexists(path):
            aside = tempfile.mkdtemp(prefix=".replaced-", dir=parent)
            os.replace(path, os.path.join(aside, "old"))
            try:
                os.replace(scratch, path)
            except BaseException:
                os.replace(os.path.join(aside, "old"), path)
                raise
            finally:
                _remove(aside)
        else:
            os.replace(scratch, path)
    except BaseException:
        _remove(scratch)
        raise


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        with contextlib.suppress(OSError):
            os.remove(path)


def write_lines(lines, path=None):
    """Writes lines (UTF-8, LF-ended) to `path`, replacing it whole, or to
    standard output when `path` is None. A line break inside a line becomes a space,
    so that line i stays line i."""
    text = "".join(line.replace("\r", " ").replace("\n", " ") + "\n" for line in lines)
    if path is None:  # UTF-8 whatever the locale, as in files
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()
        return
    with replace_file(path) as file:
        file.write(text)


def read_json(path):
    """The JSON value in `path`.

    Raises:
        FileNotFoundError, ValueError: missing, unreadable, or not JSON;
            the message names the file.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist.") from None
    except OSError as error:
        raise ValueError(f"{path} cannot be read: {error.strerror or error}.") from None
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text; the file is damaged: restore or "
                         "recreate it.") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error.msg} at line {error.lineno}, column "
                         f"{error.colno}); the file is damaged: restore or recreate it.") from None


def write_json(path, value):
    """Writes `value` as indented JSON to `path`, whole or not at all."""
    with replace_file(path) as file:
        json.dump(value, file, indent=2, ensure_ascii=False, default=str)
        file.write("\n")

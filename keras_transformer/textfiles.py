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
import io
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


def repair_warnings(name, replaced, nul):
    """One sentence for each kind of repair in the file `name`, naming the
    1-based line numbers `replaced` (bytes that were not UTF-8, now U+FFFD)
    and `nul` (NUL bytes, now spaces)."""
    notes = []
    if replaced:
        notes.append(f"{name}: {describe_lines(replaced)} had bytes that are not UTF-8; they were "
                     "replaced with U+FFFD")
    if nul:
        notes.append(f"{name}: {describe_lines(nul)} had NUL bytes; they were read as spaces")
    return notes


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
        return repair_warnings(self.name, self.replaced, self.nul)


class LineStream:
    """The lines of the UTF-8 text file `path` (standard input when None),
    read one at a time under the rules in the module docstring, for files
    of any size: iterate over it once.

    `replaced` and `nul` collect the numbers of the repaired lines as they
    are read; `new_warnings()` describes those read since its last call,
    so that a command reading a file in windows reports each window's
    repairs when it reaches them.

    Raises:
        ValueError: when created, if the file cannot be read (missing, a
            folder, not readable) or is UTF-16 or UTF-32; the message names it.
    """

    def __init__(self, path=None):
        self.name = STDIN if path is None else os.fspath(path)
        self.replaced, self.nul = [], []
        self._reported = (0, 0)
        if path is None:
            self._file = sys.stdin.buffer
            if not hasattr(self._file, "peek"):  # a replaced standard input
                self._file = io.BufferedReader(self._file)
        else:
            try:
                self._file = open(path, "rb")
            except FileNotFoundError:
                raise ValueError(f"{self.name} does not exist; check the path.") from None
            except IsADirectoryError:
                raise ValueError(f"{self.name} is a folder; give a text file, a sentence a "
                                 "line.") from None
            except PermissionError:
                raise ValueError(f"{self.name} cannot be read (permission denied); make it "
                                 "readable (chmod u+r) or copy it.") from None
            except OSError as error:
                raise ValueError(f"{self.name} cannot be read: {error.strerror or error}.") from None
        start = self._read_error(lambda: self._file.peek(4)[:4])
        try:
            check_unicode_mark(start, self.name, None if path is None else self.name)
        except ValueError:
            self.close()
            raise

    def _read_error(self, read):
        try:
            return read()
        except IsADirectoryError:
            raise ValueError(f"{self.name} is a folder; give a text file, a sentence a "
                             "line.") from None
        except OSError as error:
            raise ValueError(f"{self.name} cannot be read: {error.strerror or error}.") from None

    def __iter__(self):
        lines = iter(lambda: self._read_error(self._file.readline), b"")
        for number, line in enumerate(lines, start=1):
            if number == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8):]
                if not line:
                    break  # a file of just the byte-order mark has no lines
            text, replaced, nul = decode_line(line[:-1] if line.endswith(b"\n") else line)
            if nul:
                self.nul.append(number)
            if replaced:
                self.replaced.append(number)
            yield text
        self.close()

    def close(self):
        if self.name != STDIN:
            self._file.close()

    def warnings(self):
        """One sentence for each kind of repair so far, naming the lines."""
        return repair_warnings(self.name, self.replaced, self.nul)

    def new_warnings(self):
        """`warnings()` for the lines read since the last call."""
        replaced, nul = self._reported
        self._reported = (len(self.replaced), len(self.nul))
        return repair_warnings(self.name, self.replaced[replaced:], self.nul[nul:])


def read_lines(path=None):
    """The lines of the UTF-8 text file `path` (standard input when None),
    under the rules in the module docstring, all at once (`LineStream`
    reads them one at a time).

    Raises:
        ValueError: the file cannot be read (missing, a folder, not
            readable) or is UTF-16 or UTF-32; the message names it.
    """
    stream = LineStream(path)
    lines = list(stream)
    return Lines(stream.name, lines, stream.replaced, stream.nul)


def count_lines(path, block=1 << 20):
    """The number of lines of a file as `LineStream` reads them (a last
    line without LF counts), read in blocks: for a progress report."""
    count, last = 0, b"\n"
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(block), b""):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


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


def _line(text):
    """A line of output: a line break inside it becomes a space, so that
    line i stays line i."""
    return text.replace("\r", " ").replace("\n", " ") + "\n"


def write_lines(lines, path=None):
    """Writes lines (UTF-8, LF-ended) to `path`, replacing it whole, or to
    standard output when `path` is None. A line break inside a line becomes a space,
    so that line i stays line i."""
    with line_writer(path) as write:
        write(lines)


@contextlib.contextmanager
def line_writer(path=None):
    """Yields `write(lines)`, which appends lines as `write_lines` writes
    them: to standard output at once, or to a temporary file that replaces
    `path` only when the block ends normally (see `replace_path`)."""
    if path is None:  # UTF-8 whatever the locale, as in files
        def write(lines):
            sys.stdout.flush()
            sys.stdout.buffer.write("".join(map(_line, lines)).encode("utf-8"))
            sys.stdout.buffer.flush()

        yield write
        return
    with replace_file(path) as file:
        yield lambda lines: file.write("".join(map(_line, lines)))


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


def read_bytes(path):
    """The whole file `path` (a document translated whole: HTML, .docx).

    Raises:
        ValueError: the file cannot be read (missing, a folder, not
            readable); the message names it.
    """
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist.") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder; give a file.") from None
    except OSError as error:
        raise ValueError(f"{path} cannot be read: {error.strerror or error}.") from None


def decode_text(data, name):
    """A whole text file's bytes under the rules in the module docstring,
    its line breaks kept: `(text, warnings)` (one sentence for each kind of
    repair, as `repair_warnings`)."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    check_unicode_mark(data[:4], name)
    lines, replaced, nul = [], [], []
    for number, line in enumerate(data.split(b"\n"), start=1):
        text, bad, zero = decode_line(line)
        lines.append(text)
        if bad:
            replaced.append(number)
        if zero:
            nul.append(number)
    return "\n".join(lines), repair_warnings(name, replaced, nul)


def write_output(path, content):
    """Writes a whole document (str, as UTF-8, or bytes) to `path`,
    replacing it whole, or to standard output when `path` is None."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    if path is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    with replace_file(path, "wb") as file:
        file.write(data)

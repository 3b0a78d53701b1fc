"""The rules for awkward text input and for output written whole or not at
all (keras_transformer.textfiles), and the commands' error handling
(keras_transformer.cli). No model needed."""

import argparse
import io
import os
import sys

import pytest

from keras_transformer import cli, textfiles
from keras_transformer.models import TransformerConfig


def _read(tmp_path, data):
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    return textfiles.read_lines(path)


def test_lines_are_read_with_one_rule_for_each_kind_of_damage(tmp_path):
    data = (b"\xef\xbb\xbfGuten Morgen!\r\n"   # byte-order mark, Windows line end
            b"Stra\xdfe\n"                      # Latin-1, not UTF-8
            b"\n"                               # empty
            b"  \t \r\n"                        # blank
            b"Haus\x00Baum\n"                   # NUL
            b"ein\rBaum\n"                      # a lone CR stays inside its line
            b"ohne Zeilenende")                 # no LF at the end
    lines = _read(tmp_path, data)
    assert lines.lines == ["Guten Morgen!", "Stra\ufffde", "", "  \t ", "Haus Baum", "ein\rBaum",
                           "ohne Zeilenende"]
    assert lines.replaced == [2] and lines.nul == [5]
    assert lines.warnings() == [
        f"{tmp_path / 'input.txt'}: line 2 had bytes that are not UTF-8; they were replaced "
        "with U+FFFD",
        f"{tmp_path / 'input.txt'}: line 5 had NUL bytes; they were read as spaces"]


def test_empty_files_and_final_line_ends(tmp_path):
    assert _read(tmp_path, b"").lines == []
    assert _read(tmp_path, b"\n").lines == [""]
    assert _read(tmp_path, b"a\nb\n").lines == ["a", "b"]
    assert _read(tmp_path, b"\xef\xbb\xbf").lines == []
    assert not _read(tmp_path, b"a\n").warnings()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_utf16_and_utf32_files_are_refused_with_the_conversion_command(tmp_path, encoding):
    with pytest.raises(ValueError, match=rf"input.txt is {encoding.upper()} text .* iconv -f "
                                         rf"{encoding.upper()} -t UTF-8"):
        _read(tmp_path, "Guten Morgen!\n".encode(encoding))


def test_files_that_cannot_be_read_are_named(tmp_path):
    with pytest.raises(ValueError, match="missing.txt does not exist; check the path"):
        textfiles.read_lines(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="is a folder; give a text file"):
        textfiles.read_lines(tmp_path)
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.txt"
        locked.write_text("a\n")
        locked.chmod(0)
        with pytest.raises(ValueError, match="locked.txt cannot be read .permission denied"):
            textfiles.read_lines(locked)


def test_standard_input_is_read_as_bytes(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\xffb\r\nc\n")))
    lines = textfiles.read_lines()
    assert lines.lines == ["a\ufffdb", "c"] and lines.replaced == [1]
    assert lines.warnings()[0].startswith("standard input: line 1 had bytes")


def test_clean_text_takes_bytes_and_strings_with_lone_surrogates():
    assert textfiles.clean_text(b"a\xff\x00b") == "a\ufffd b"
    assert textfiles.clean_text("a\udcff\ud800b") == "a\ufffd\ufffdb"
    assert textfiles.clean_text("schön") == "schön"


def test_line_numbers_are_named_as_ranges():
    assert textfiles.describe_lines([4]) == "line 4"
    assert textfiles.describe_lines([3, 4, 5, 9]) == "lines 3-5 and 9"
    assert textfiles.describe_lines([1, 2]) == "lines 1-2"
    assert textfiles.describe_lines(list(range(1, 40, 2))) == \
        "lines 1, 3, 5, 7, 9, 11, 13, 15, 17, 19 and 10 more"


def test_outputs_that_exist_or_cannot_be_written_are_refused_up_front(tmp_path):
    existing = tmp_path / "out.txt"
    existing.write_text("earlier\n")
    with pytest.raises(FileExistsError, match="out.txt exists; pass --overwrite to replace it"):
        textfiles.check_output(existing)
    assert textfiles.check_output(existing, overwrite=True) == str(existing)
    with pytest.raises(ValueError, match="is a folder; give a file path"):
        textfiles.check_output(tmp_path, overwrite=True)
    with pytest.raises(ValueError, match="the folder .*nowhere does not exist; create it first"):
        textfiles.check_output(tmp_path / "nowhere" / "out.txt")
    with pytest.raises(ValueError, match="out.txt is not a folder"):
        textfiles.check_output(existing / "inside.txt")
    # A folder's missing parents are created later; a file in the way is not.
    textfiles.check_output(tmp_path / "a" / "b" / "export", folder=True)
    with pytest.raises(ValueError, match="out.txt is not a folder"):
        textfiles.check_output(existing / "export", folder=True)
    assert existing.read_text() == "earlier\n"


def _left(folder):
    return sorted(name for name in os.listdir(folder) if name.startswith("."))


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_write_keeps_the_earlier_file(tmp_path, interruption):
    path = tmp_path / "out.txt"
    path.write_text("earlier\n")
    path.chmod(0o640)
    with pytest.raises(interruption):
        with textfiles.replace_file(path) as file:
            file.write("half of the new ")
            raise interruption()
    assert path.read_text() == "earlier\n" and not _left(tmp_path)
    textfiles.write_lines(["new", "two\nlines"], path)
    assert path.read_text() == "new\ntwo lines\n" and not _left(tmp_path)
    assert path.stat().st_mode & 0o777 == 0o640


def test_an_interrupted_folder_keeps_the_earlier_folder(tmp_path):
    target = tmp_path / "export"
    target.mkdir()
    (target / "keep.txt").write_text("earlier")
    with pytest.raises(KeyboardInterrupt):
        with textfiles.replace_folder(target) as scratch:
            with open(os.path.join(scratch, "new.txt"), "w") as file:
                file.write("half")
            raise KeyboardInterrupt
    assert os.listdir(target) == ["keep.txt"] and not _left(tmp_path)
    with textfiles.replace_folder(target) as scratch:
        with open(os.path.join(scratch, "new.txt"), "w") as file:
            file.write("whole")
    assert os.listdir(target) == ["new.txt"] and not _left(tmp_path)


def test_damaged_json_and_config_files_are_named(tmp_path):
    path = tmp_path / "config.json"
    with pytest.raises(FileNotFoundError, match="config.json does not exist"):
        TransformerConfig.from_file(path)
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"config.json is not valid JSON \(Expecting value at line 1"):
        TransformerConfig.from_file(path)
    path.write_text('{"d_model": 512,')
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        TransformerConfig.from_file(path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="config.json must hold a JSON object"):
        TransformerConfig.from_file(path)
    path.write_text('{"d_model": 500}')
    with pytest.raises(ValueError, match="config.json: TransformerConfig.d_model=500 is not divisible"):
        TransformerConfig.from_file(path)
    textfiles.write_json(path, {"d_model": 256, "num_heads": 4})
    assert TransformerConfig.from_file(path).d_model == 256


def test_commands_end_bad_input_with_one_line_and_ctrl_c_with_130(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tool.py"])

    def fails():
        raise FileExistsError("out.txt exists;\n pass --overwrite")

    with pytest.raises(SystemExit) as exit_:
        cli.run(fails)
    assert exit_.value.code == 1
    assert capsys.readouterr().err == "tool.py: error: out.txt exists; pass --overwrite\n"

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_:
        cli.run(interrupted, interrupted="nothing was written")
    assert exit_.value.code == 130
    assert capsys.readouterr().err == "\ntool.py: interrupted; nothing was written\n"

    def bug():
        raise KeyError("a bug, not bad input")

    with pytest.raises(KeyError):  # keeps its traceback
        cli.run(bug)


def test_option_types_reject_out_of_range_values():
    assert cli.positive_int("3") == 3 and cli.non_negative_float("0") == 0.0
    for kind, text in [(cli.positive_int, "0"), (cli.positive_int, "x"), (cli.non_negative_int, "-1"),
                       (cli.positive_float, "0"), (cli.non_negative_float, "nan")]:
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)

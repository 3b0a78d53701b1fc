"""Files that tests hand to what reads documents and corpora."""

import io
import zipfile


def zip_bomb():
    """A .docx-named zip of about 1 MB that unzips to 1 GB (its one
    member written a megabyte at a time)."""
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w") as member:
            for _ in range(1024):
                member.write(b"\0" * 2**20)
    return data.getvalue()


def ding_file(path, count=600):
    """Writes `count` pairs in the Ding dictionary's line format (numbered
    words and phrases) to `path`, and returns it."""
    words = "Haus Baum Hund Katze Tisch Stuhl Buch Stadt".split()
    english = "house tree dog cat table chair book town".split()
    lines = [f"{words[i % 8]} {i % 50} und {words[(i // 8) % 8]} :: "
             f"{english[i % 8]} {i % 50} and {english[(i // 8) % 8]}\n" for i in range(count)]
    path.write_text("".join(lines), encoding="utf-8")
    return path

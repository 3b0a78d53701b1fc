"""Files that tests hand to what reads documents."""

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

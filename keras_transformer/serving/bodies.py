"""What a request sends: its query string and its body (a JSON object or a
form, urlencoded or multipart, with files), read within the server's size
limits. Each API merges them as its own clients expect (LibreTranslate's:
`libretranslate.merged_fields`).
"""

import dataclasses
import json
import urllib.parse

from starlette.datastructures import UploadFile
from starlette.requests import Request

from keras_transformer.serving.errors import Refused


@dataclasses.dataclass
class Upload:
    """A file sent in a multipart form."""

    filename: str
    data: bytes


@dataclasses.dataclass
class Sent:
    """A request's fields, in the order sent.

    Attributes:
        json: the body's JSON object, or None where the body is no JSON.
        form: `(name, value)` pairs of a form body (values str or `Upload`).
        query: `(name, value)` pairs of the query string.
    """

    json: dict = None
    form: list = dataclasses.field(default_factory=list)
    query: list = dataclasses.field(default_factory=list)


JSON_TYPES = ("application/json",)


async def read(request, max_body_bytes):
    """The request's `Sent` fields, its body read up to `max_body_bytes`
    (413 beyond); its query string's length is the application's to bound
    (`app.create_app`).

    The body is JSON where its type says so (application/json or any
    +json type), a form where its type is a form's, and otherwise JSON if
    it parses as a JSON object (clients that leave out the type) or no
    fields if empty; anything else is a 400."""
    query = request.scope.get("query_string", b"").decode("latin-1")
    sent = Sent(query=urllib.parse.parse_qsl(query, keep_blank_values=True, encoding="utf-8",
                                             errors="replace"))
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > max_body_bytes:
        raise Refused(413, f"The request's body ({declared} bytes) is over this server's limit "
                           f"of {max_body_bytes} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body_bytes:
            raise Refused(413, f"The request's body is over this server's limit of "
                               f"{max_body_bytes} bytes")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        sent.form = urllib.parse.parse_qsl(body.decode("utf-8", errors="replace"),
                                           keep_blank_values=True)
    elif kind == "multipart/form-data":
        sent.form = await _multipart(request, body)
    elif kind in JSON_TYPES or kind.endswith("+json"):
        sent.json = _json_object(body)
    elif body.strip():
        sent.json = _json_object(body)
    return sent


def _json_object(body):
    try:
        fields = json.loads(body)
    except ValueError:
        raise Refused(400, "Invalid request: the body is not JSON (or a form)") from None
    if not isinstance(fields, dict):
        raise Refused(400, "Invalid request: the body must be a JSON object")
    return fields


async def _multipart(request, body):
    """A multipart body's fields, parsed by Starlette (python-multipart)
    from the body already read."""
    async def replay():
        return {"type": "http.request", "body": body, "more_body": False}

    fields = []  # a malformed body: Starlette's HTTPException, a 400
    async with Request(request.scope, replay).form() as form:
        for name, value in form.multi_items():
            fields.append((name, Upload(value.filename, await value.read())
                           if isinstance(value, UploadFile) else value))
    return fields

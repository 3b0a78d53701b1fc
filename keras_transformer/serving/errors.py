"""The server's refusals: what an API answers with a status and one line,
and the Starlette exception handlers that write them in an API's error
body."""

import logging

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

LOG = logging.getLogger("keras_transformer.serving")


class Refused(Exception):
    """A request answered with `status` and a one-line `message`, in the
    error body of the API it came to (LibreTranslate's `{"error": ...}`);
    `headers` go with it (Retry-After)."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def exception_handlers(field):
    """Starlette's `exception_handlers` answering in an API's error body,
    `{field: "..."}` (LibreTranslate's "error", DeepL's "message"): a
    `Refused` with its status, Starlette's own 404s and 405s, and any other
    exception, a fault of the server's own, as a 500 logged with its
    traceback."""
    async def refused(request, error):
        return JSONResponse({field: error.message}, status_code=error.status,
                            headers=error.headers)

    async def http_error(request, error):
        return JSONResponse({field: error.detail}, status_code=error.status_code,
                            headers=getattr(error, "headers", None))

    async def fault(request, error):
        LOG.exception("Fault while answering %s %s", request.method, request.url.path)
        return JSONResponse({field: f"Internal error: {type(error).__name__}"}, status_code=500)

    return {Refused: refused, HTTPException: http_error, Exception: fault}

"""Cross-origin requests (CORS), answered as LibreTranslate answers them, so
that pages and browser extensions on other origins can call the server.

LibreTranslate puts its CORS headers on every answer, whether or not the
request named an origin, and answers every preflight (`OPTIONS`) itself.
Starlette's CORSMiddleware adds them only to requests that carry an
`Origin` header, so clients that check the headers of a plain request see
none; hence this small middleware of our own. `--cors-origins` restricts
the origins: an allowed one is echoed back (with `Vary: Origin`), a request
from another gets no CORS header, so browsers keep its answer from the
page, and its preflight is refused with a 403.
"""

import json

HEADERS = [(b"access-control-allow-headers", b"Authorization, Content-Type"),
           (b"access-control-expose-headers", b"Authorization"),
           (b"access-control-allow-methods", b"GET, POST"),
           (b"access-control-allow-credentials", b"true"),
           (b"access-control-max-age", b"1728000")]
"""LibreTranslate's CORS headers besides the origin (its Max-Age: 20 days)."""


class Cors:
    """An ASGI application with CORS headers on every HTTP answer, and
    preflights answered; `origins` is ("*",) for any origin, else the
    origins allowed (such as "https://example.org")."""

    def __init__(self, app, origins=("*",)):
        self.app = app
        self.any = "*" in origins
        self.origins = frozenset(origin.rstrip("/") for origin in origins)

    def _headers(self, origin):
        if self.any:
            return [(b"access-control-allow-origin", b"*"), *HEADERS]
        if origin in self.origins:
            return [(b"access-control-allow-origin", origin.encode("latin-1")),
                    (b"vary", b"Origin"), *HEADERS]
        return []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request_headers = dict(scope["headers"])
        origin = request_headers.get(b"origin", b"").decode("latin-1")
        headers = self._headers(origin)
        if scope["method"] == "OPTIONS":
            if origin and not headers:
                body = json.dumps({"error": f"The origin {origin[:200]} is not allowed by this "
                                            "server (--cors-origins)"}).encode()
                await send({"type": "http.response.start", "status": 403, "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
            await send({"type": "http.response.start", "status": 200, "headers": [
                *headers, (b"allow", b"GET, POST, OPTIONS"), (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=[*message.get("headers", ()), *headers])
            await send(message)

        await self.app(scope, receive, send_with_headers)

"""The server's refusals: what an API answers with a status and one line."""


class Refused(Exception):
    """A request answered with `status` and a one-line `message`, in the
    error body of the API it came to (LibreTranslate's `{"error": ...}`);
    `headers` go with it (Retry-After)."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers

"""The access log without credentials: a key sent in the query string (`?api_key=...`, `?token=...`) would be
written to every log line of its requests, and logs travel further than keys should. The query values of
credential-like names are replaced by `***` in uvicorn's access log records."""

from __future__ import annotations

import logging
import re

ACCESS_LOGGER = "uvicorn.access"
SECRET_NAMES = ("api_key", "apikey", "api-key", "key", "token", "access_token", "auth", "authorization",
                "password", "secret")  # fmt: skip
_SECRET = re.compile(r"(?i)([?&;](?:" + "|".join(re.escape(n) for n in SECRET_NAMES) + r")=)[^&;#\s]*")


def redact(path: str) -> str:
    """`path` (with its query string) with the values of credential-like parameters replaced by ***."""
    return _SECRET.sub(r"\1***", path)


class RedactSecrets(logging.Filter):
    """Rewrites uvicorn's access records ('%s - "%s %s HTTP/%s" %d': client, method, path, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact(args[2]), *args[3:])
        elif isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def redact_access_log() -> None:
    """Install the filter on uvicorn's access logger (once per process)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())

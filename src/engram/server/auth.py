"""Bearer-key authentication and per-key scopes (which memories, read-only or not).

With no keys configured every request is allowed (the server then only listens on loopback). Keys are
compared in constant time and never written to logs or error messages.
"""

from __future__ import annotations

import hmac

from engram.server.errors import ApiError
from engram.server.settings import ApiKey


class Access:
    def __init__(self, keys: list[ApiKey]) -> None:
        self.keys = list(keys)

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def identify(self, authorization: str | None) -> ApiKey | None:
        """The key an `Authorization` header carries; None when auth is off. 401 when it is on and the
        header is missing or carries an unknown key."""
        if not self.enabled:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "unauthorized", "this server needs an API key: send 'Authorization: Bearer KEY'")
        token = token.strip()
        found = None
        for key in self.keys:  # every key is compared, so timing does not tell how many matched
            if hmac.compare_digest(key.secret.encode(), token.encode()):
                found = key
        if found is None:
            raise ApiError(401, "unauthorized", "unknown API key")
        return found

    def check(self, key: ApiKey | None, memory: str, write: bool = False) -> None:
        """403 when `key` may not read (or, for a write, change) `memory`."""
        if key is None:
            return
        if not key.may_read(memory):
            raise ApiError(403, "forbidden", f"this API key has no access to memory {memory!r}")
        if write and not key.may_write(memory):
            raise ApiError(403, "forbidden", "this API key is read-only: it cannot change memories")

    def visible(self, key: ApiKey | None, names: list[str]) -> list[str]:
        return [n for n in names if key is None or key.may_read(n)]

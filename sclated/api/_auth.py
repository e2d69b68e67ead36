"""Tenants and their bearer tokens."""

from __future__ import annotations

import hmac
import logging
from contextvars import ContextVar
from pathlib import Path

from sclated.errors import ConfigError, InvalidArgument, Unauthenticated
from sclated.runs import validate_tenant

__all__ = ["LOCAL_TENANT", "TokenTable", "current_tenant", "parse_tokens"]

log = logging.getLogger("sclated.auth")

LOCAL_TENANT = "local"
current_tenant: ContextVar[str] = ContextVar("sclate_tenant")


def parse_tokens(text: str, source: str = "tokens file") -> dict[str, str]:
    """`TOKEN TENANT` per line; `#` starts a comment. Errors name the line."""
    out: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise _line_error(
                source, n, f"expected 'TOKEN TENANT', got {len(parts)} field{'' if len(parts) == 1 else 's'}"
            )
        token, tenant = parts
        if len(token) < 16:
            raise _line_error(source, n, "token shorter than 16 characters")
        try:
            validate_tenant(tenant)
        except InvalidArgument as exc:
            raise _line_error(source, n, exc.message) from None
        if token in out:
            raise _line_error(source, n, f"token listed twice (first on line {first_line[token]})")
        out[token] = tenant
        first_line[token] = n
    return out


def _line_error(source: str, line: int, problem: str) -> ConfigError:
    # Never the token itself: the message goes to logs.
    return ConfigError(problem, path=source, line=line, field="tokens_file")


class TokenTable:
    """Maps bearer tokens to tenants; None path = one local tenant without auth."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._tokens: dict[str, str] = {}
        if path is not None:
            self._tokens = self._read(path)

    @property
    def open_access(self) -> bool:
        return self.path is None

    @staticmethod
    def _read(path: Path) -> dict[str, str]:
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the tokens file: {exc.strerror or exc}", path=path, field="tokens_file"
            ) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"the tokens file is not UTF-8 text (byte {exc.start})", path=path, field="tokens_file"
            ) from None
        return parse_tokens(text, str(path))

    def reload(self) -> bool:
        """Re-read the file (SIGHUP). A broken file keeps the previous table and says why."""
        if self.path is None:
            return False
        try:
            self._tokens = self._read(self.path)
        except InvalidArgument as exc:
            log.error("tokens file not reloaded, keeping the previous one: %s", exc.message)
            return False
        log.info("tokens file reloaded: %d tokens", len(self._tokens))
        return True

    def tenant_for(self, authorization: str | None) -> str:
        if self.path is None:
            return LOCAL_TENANT
        if not authorization:
            raise Unauthenticated("missing bearer token (metadata 'authorization: Bearer <token>')")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("authorization metadata must be 'Bearer <token>'")
        found = None
        for known, tenant in self._tokens.items():
            # Compare every entry in constant time, so timing tells nothing.
            if hmac.compare_digest(known.encode(), token.strip().encode()):
                found = tenant
        if found is None:
            raise Unauthenticated("unknown bearer token")
        return found

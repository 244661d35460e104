"""What may be shown of a URL: logs, /api/v1/status and the page name a target or the query API
by its URL without the credentials or query it may carry."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """The URL without credentials or query: safe to log and to serve on /api/v1/status."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

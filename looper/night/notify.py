"""Paging a person through apprise, with secrets redacted from every message.

:func:`redact` is also the way run text enters the database, the journal and the report: it
strips control characters and terminal escape sequences first (:func:`looper.core.untrusted.clean`,
``\n`` and ``\t`` kept), so no page, log or report carries them."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Protocol

from looper.core.untrusted import clean

log = logging.getLogger("looper.notify")

_SECRET_PATTERNS = [
    re.compile(r"(?i)\b(sk|pk|rk|xox[abp])-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}"),
    re.compile(r"(?i)\b(api[_-]?key|token|secret|password|passwd)\b(\s*[=:]\s*)\S+"),
    re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@]+@"),  # credentials in URLs
]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Control characters and escape sequences stripped; known secret values and anything shaped like
    a key, token or URL credential removed."""
    text = clean(text)
    for s in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(s, "***")
    text = _SECRET_PATTERNS[0].sub(lambda m: m.group(1) + "-***", text)
    text = _SECRET_PATTERNS[1].sub(lambda m: m.group(1) + "***", text)
    text = _SECRET_PATTERNS[2].sub(lambda m: m.group(1) + m.group(2) + "***", text)
    text = _SECRET_PATTERNS[3].sub(lambda m: m.group(1) + "***@", text)
    return text


class Notifier(Protocol):
    def page(self, title: str, body: str) -> tuple[bool, str]:
        """Send one page. Returns (delivered, problem in words)."""
        ...


class AppriseNotifier:
    def __init__(self, urls: list[str], secrets: Iterable[str] = ()) -> None:
        self.urls = list(urls)
        self.secrets = list(secrets) + self.urls

    def page(self, title: str, body: str) -> tuple[bool, str]:
        if not self.urls:
            return False, "no notification URL configured ([notify] urls or LOOPER_NOTIFY_URLS)"
        import apprise

        ap = apprise.Apprise()
        bad = [i for i, u in enumerate(self.urls) if not ap.add(u)]
        if bad:
            return False, f"{len(bad)} notification URL(s) not understood by apprise (index {bad})"
        try:
            ok = ap.notify(title=redact(title, self.secrets), body=redact(body, self.secrets))
        except Exception as exc:  # apprise plugins may raise on odd transports
            return False, f"apprise raised {type(exc).__name__}: {redact(str(exc), self.secrets)}"
        return (True, "") if ok else (False, "apprise could not deliver to at least one URL")

"""Paging a person through apprise, with secrets redacted from every message
(:func:`looper.core.verdicts.untrusted.redact`, also the way run text enters the database, the journal and the
report)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from looper.core.verdicts.untrusted import redact

log = logging.getLogger("looper.notify")





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

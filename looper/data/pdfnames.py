"""A PDF page's name in an export (``drawing.pdf#page=N``) and a PDF's page count: what reading an export's
layout needs of a PDF, apart from rendering it (looper.data.pdf)."""

from __future__ import annotations

import re
from pathlib import Path

DEFAULT_DPI = 150
PAGE_FRAGMENT = re.compile(r"^(?P<file>.+\.pdf)#page=(?P<page>[1-9][0-9]*)$", re.IGNORECASE)


def split_name(name: str) -> tuple[str, int | None]:
    """``("drawing.pdf", 3)`` for ``drawing.pdf#page=3``; ``(name, None)`` for anything else."""
    m = PAGE_FRAGMENT.match(name)
    return (m["file"], int(m["page"])) if m else (name, None)


def page_count(path: Path) -> int:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        return len(pdf)
    finally:
        pdf.close()



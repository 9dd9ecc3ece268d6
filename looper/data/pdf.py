"""PDF drawings in an import: every page rendered at a stated resolution (``--dpi``, default 150) with
pypdfium2 (PDFium, the renderer Chrome uses; docs/DEPENDENCIES.md), then imported as any page image.

A PDF page is named ``drawing.pdf#page=N`` (N from 1), in a COCO ``file_name`` and as the page's key.
The export's boxes are pixels of the page rendered at the dpi given: page size in points x dpi / 72.
Each page is rendered once, grey, into a temporary folder the import removes, one page held at a time;
its pixel size is computed from the page's size in points first, so a page over the pixel budget is
refused by name before it is rendered.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from looper.data.formats import Source, SourcePage
from looper.data.paths import over_budget


def pixel_size(width_pt: float, height_pt: float, dpi: int) -> tuple[int, int]:
    """The size in px of a page of ``width_pt`` x ``height_pt`` points at ``dpi``, rounded (a letter page at
    150 dpi: 1275 x 1650 px; PDFium's own bitmap may be a pixel larger from float error, and is cut to it)."""
    return max(1, round(width_pt * dpi / 72)), max(1, round(height_pt * dpi / 72))


def _render(page: SourcePage, pdf: object, folder: Path, dpi: int, max_pixels: int, n: int) -> SourcePage:
    from PIL import Image

    if page.pdf_page is None or page.refused:
        return page
    if not 1 <= page.pdf_page <= len(pdf):  # type: ignore[arg-type]
        return replace(page, refused=(page.key, f"the PDF has {len(pdf)} page(s), not a page {page.pdf_page}"))  # type: ignore[arg-type]
    doc_page = pdf[page.pdf_page - 1]  # type: ignore[index]
    w, h = pixel_size(*doc_page.get_size(), dpi)
    if page.size and page.size != (w, h):
        return replace(page, refused=(page.key, f"rendered at {dpi} dpi the page is {w} x {h} px, the export says "
                                                f"{page.size[0]} x {page.size[1]} px; import with the dpi its labels "
                                                "were drawn at (--dpi)"))
    big = over_budget(w, h, max_pixels)
    if big:
        return replace(page, refused=(page.key, f"{big} (rendered at {dpi} dpi)"))
    img = doc_page.render(scale=dpi / 72, grayscale=True).to_pil().convert("L")
    if img.size != (w, h):
        paper = Image.new("L", (w, h), 255)
        paper.paste(img.crop((0, 0, min(w, img.width), min(h, img.height))), (0, 0))
        img = paper
    out = folder / f"{n:05d}.png"
    img.save(out, format="PNG", compress_level=1)
    return replace(page, image=out)


def render_pdf_pages(source: Source, folder: Path, dpi: int, max_pixels: int) -> Source:
    """``source`` with each PDF page's image rendered into ``folder`` (a page of a PDF that does not open,
    or that lacks the page, or over the budget, is refused by name, not rendered)."""
    import pypdfium2 as pdfium

    pages: list[SourcePage] = []
    docs: dict[Path, object] = {}
    try:
        for n, page in enumerate(source.pages):
            if page.pdf_page is None or page.refused:
                pages.append(page)
                continue
            if page.image not in docs:
                try:
                    docs[page.image] = pdfium.PdfDocument(str(page.image))
                except (pdfium.PdfiumError, OSError) as exc:
                    docs[page.image] = f"PDF unreadable ({type(exc).__name__})"
            pdf = docs[page.image]
            if isinstance(pdf, str):
                pages.append(replace(page, refused=(page.key, pdf)) if page.image.is_file() else page)
                continue
            pages.append(_render(page, pdf, folder, dpi, max_pixels, n))
    finally:
        for doc in docs.values():
            if not isinstance(doc, str):
                doc.close()  # type: ignore[attr-defined]
    return replace(source, pages=tuple(pages))

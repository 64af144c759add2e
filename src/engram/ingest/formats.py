"""Text out of the document formats people keep notes and papers in: HTML (the main text, not the markup), PDF
(the text of each page) and DOCX (paragraphs and tables, headings as lines of their own). The parsers are in the
`docs` extra; a missing one raises MissingDependencyError naming it, a file a parser cannot read InputError
naming the file and the reason, so the caller skips that one file and loses nothing else."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.errors import InputError, MissingDependencyError
from engram.text import clean_text, valid_unicode

HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
PDF_SUFFIXES = {".pdf"}
DOCX_SUFFIXES = {".docx"}
DOCUMENT_SUFFIXES = HTML_SUFFIXES | PDF_SUFFIXES | DOCX_SUFFIXES
INSTALL_HINT = "pip install 'engram[docs]'"

# A PDF's pages are documents of their own: `FILE_ID#page=N` (see `page_id`).
_PAGE_ID = re.compile(r"^(?P<file>.+\.pdf)#page=(?P<page>[1-9][0-9]*)$", re.IGNORECASE)

# Elements that hold no reading text, wherever they are; site chrome (header, footer) only outside the article.
_NEVER_TEXT = ["script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed", "form",
               "button", "select", "textarea", "nav", "aside", "head", "title"]  # fmt: skip
_CHROME = ["header", "footer"]
_CHROME_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search"}
_BLOCKS = ["p", "div", "section", "article", "main", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "tr",
           "td", "th", "pre", "blockquote", "figcaption", "br", "hr", "table", "ul", "ol", "dl", "header", "footer",
           "caption", "address"]  # fmt: skip
_SPACES = re.compile(r"[^\S\n]+")


@dataclass(frozen=True)
class Part:
    """The text of a file, or of one page of it (`page`, counted from 1), with the title the file gives."""

    text: str
    title: str | None
    page: int | None = None


def page_id(file_id: str, page: int) -> str:
    """The id of page `page` of the PDF whose id would be `file_id` (`notes/paper.pdf#page=3`)."""
    return f"{file_id}#page={page}"


def file_id_of(doc_id: str) -> str:
    """The id of the file a document was read from: a PDF page's id without `#page=N`, any other id itself."""
    found = _PAGE_ID.match(doc_id)
    return found.group("file") if found else doc_id


def read_document(path: Path) -> list[Part]:
    """The parts of an HTML, PDF or DOCX file: one for HTML and DOCX, one per page with text for a PDF."""
    suffix = path.suffix.lower()
    if suffix in HTML_SUFFIXES:
        return [_read_html(path)]
    if suffix in PDF_SUFFIXES:
        return _read_pdf(path)
    if suffix in DOCX_SUFFIXES:
        return [_read_docx(path)]
    raise InputError(f"{path}: {suffix or 'no extension'} is not a document format engram reads")


def _need(module: str, package: str, kind: str) -> Any:
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:
        raise MissingDependencyError(f"reading {kind} files needs {package}: {INSTALL_HINT}") from exc


def _unreadable(path: Path, kind: str, exc: Exception) -> InputError:
    detail = str(exc).strip() or "no detail"
    return InputError(f"{path} cannot be read as {kind} ({type(exc).__name__}: {detail[:200]})")


def _lines(text: str) -> str:
    """Whitespace folded inside each line, empty lines dropped; control characters (a NUL a parser passed on
    from the file or an unmapped PDF glyph) and lone surrogates, which would refuse the whole batch, dropped."""
    text = clean_text(valid_unicode(text))
    return "\n".join(line for line in (_SPACES.sub(" ", raw).strip() for raw in text.splitlines()) if line)


# HTML -------------------------------------------------------------------------------------------------------
def _read_html(path: Path) -> Part:
    """The page's main text: its <main>, else its <article>s, else its <body> less header, footer and
    navigation; scripts, styles and forms never. The title is the <title>, else the first <h1>."""
    bs4 = _need("bs4", "beautifulsoup4", "HTML")
    data = path.read_bytes()
    try:
        soup = bs4.BeautifulSoup(data, "html.parser")  # decodes by the page's own charset declaration
        title = _html_title(soup)
        region = _html_region(soup)
        text = _html_text(region, chrome=region.name in ("body", "[document]"))
    except Exception as exc:  # a parser's failure on one file, of whatever kind, skips that file only
        raise _unreadable(path, "HTML", exc) from exc
    return Part(text, title)


def _html_title(soup: Any) -> str | None:
    for tag in (soup.find("title"), soup.find("h1")):
        if tag is not None:
            title = " ".join(_lines(tag.get_text(" ")).split())
            if title:
                return title
    return None


def _html_region(soup: Any) -> Any:
    main = soup.find("main") or soup.find(attrs={"role": "main"})
    if main is not None:
        return main
    articles = soup.find_all("article")
    if len(articles) == 1:
        return articles[0]
    body = soup.find("body")
    return body if body is not None else soup


def _html_text(region: Any, chrome: bool) -> str:
    junk = list(region.find_all(_NEVER_TEXT + (_CHROME if chrome else [])))
    junk += [t for t in region.find_all(attrs={"role": True}) if str(t.get("role")).lower() in _CHROME_ROLES]
    junk += list(region.find_all(attrs={"hidden": True})) + list(region.find_all(attrs={"aria-hidden": "true"}))
    for tag in junk:
        tag.decompose()  # a tag inside one decomposed before is gone with it; decomposing it again is harmless
    for tag in region.find_all(_BLOCKS):
        tag.insert_before("\n")
        tag.insert_after("\n")
    return _lines(region.get_text())


# PDF --------------------------------------------------------------------------------------------------------
def _read_pdf(path: Path) -> list[Part]:
    """One part per page that has text, numbered from 1 as the PDF orders its pages. An encrypted PDF is read
    when it opens with the empty password (as viewers do), else refused; a PDF without any text (a scan) too."""
    pypdf = _need("pypdf", "pypdf", "PDF")
    try:
        reader = pypdf.PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise InputError(f"{path} is an encrypted PDF that needs a password: decrypt it first")
        title = _pdf_title(reader)
        parts = [Part(text, title, number) for number, text in _pdf_pages(reader) if text]
    except InputError:
        raise
    except Exception as exc:  # pypdf raises many kinds on damaged files; each skips that file only
        raise _unreadable(path, "PDF", exc) from exc
    if not parts:
        raise InputError(f"{path} has no text on any page (a scan? run OCR on it first)")
    return parts


def _pdf_pages(reader: Any) -> list[tuple[int, str]]:
    return [(number, _lines(page.extract_text() or "")) for number, page in enumerate(reader.pages, start=1)]


def _pdf_title(reader: Any) -> str | None:
    info = reader.metadata
    title = getattr(info, "title", None) if info is not None else None
    if not isinstance(title, str):
        return None
    return " ".join(_lines(title).split()) or None


# DOCX -------------------------------------------------------------------------------------------------------
def _read_docx(path: Path) -> Part:
    """Paragraphs and table rows in document order, one line each (a heading is a line of its own; a row's
    cells are joined by " | "). The title is the document's title property, else its first Title or Heading 1."""
    docx = _need("docx", "python-docx", "DOCX")
    try:
        document = docx.Document(str(path))
        lines: list[str] = []
        heading: str | None = None
        for block in document.iter_inner_content():
            if hasattr(block, "rows"):
                lines.extend(_table_rows(block))
                continue
            text = block.text.strip()
            style = (block.style.name if block.style is not None else "") or ""
            if text and heading is None and style in ("Title", "Heading 1"):
                heading = text
            lines.append(text)
        title = " ".join(_lines(document.core_properties.title or "").split()) or heading
    except Exception as exc:  # a broken zip, a missing part, bad XML: that file only
        raise _unreadable(path, "DOCX", exc) from exc
    return Part(_lines("\n".join(lines)), title)


def _table_rows(table: Any) -> list[str]:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            if text and (not cells or cells[-1] != text):  # a merged cell repeats in each column it spans
                cells.append(text)
        rows.append(" | ".join(cells))
    return rows

"""HTML, PDF and DOCX files in folders (engram.ingest.formats): `engram index` and `Memory.sync` read their text,
not their markup; each PDF page is a document whose passages carry the page; a file that cannot be read, or
whose parser is not installed, is named with the reason and nothing else is lost; sync mirrors edits and
deletions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from engram import Memory
from engram.cli import main
from engram.embed import HashEmbedder
from engram.ingest.sources import collect

pytest.importorskip("bs4")
pytest.importorskip("pypdf")
docx = pytest.importorskip("docx")
fpdf = pytest.importorskip("fpdf")

JUNK = ["SCRIPTJUNK", "STYLEJUNK", "NAVJUNK", "FOOTERJUNK", "COMMENTJUNK", "FORMJUNK", "<", ">", "{"]
ARTICLE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Tide Notes</title>
<style>body {{ color: red }} .STYLEJUNK {{}}</style>
<script>var tracker = "SCRIPTJUNK"; if (a < b) {{ send(); }}</script></head>
<body><nav><a href="/">Home NAVJUNK</a> | <a href="/about">About NAVJUNK</a></nav>
<form><input name="q"><button>Search FORMJUNK</button></form>
<article><header><h1>Tides of the sea</h1></header>
<p>{first} <b>pulls</b> the oceans into two bulges.</p>
<!-- COMMENTJUNK -->
<p>Spring tides come at new and full moon, when sun and moon line up.</p></article>
<footer>Copyright FOOTERJUNK</footer><script>track("SCRIPTJUNK")</script></body></html>"""
PAGES = [
    "Glaciers carve U-shaped valleys into the mountains.",
    "Moraines mark the places where the ice stopped.",
    " ".join(f"Drumlin{i} lies in the till plain." for i in range(90)),  # over 300 words: several passages
]


def write_html(path: Path, first: str = "The moon") -> None:
    path.write_text(ARTICLE.format(first=first), encoding="utf-8")


def write_pdf(path: Path, pages: list[str]) -> None:
    pdf = fpdf.FPDF()
    pdf.set_title("Glacier Report")
    for text in pages:
        pdf.add_page()
        pdf.set_font("Helvetica", size=10)
        pdf.multi_cell(0, 5, text)
    pdf.output(str(path))


def write_docx(path: Path) -> None:
    document = docx.Document()
    document.add_heading("Bread Baking", level=1)
    document.add_paragraph("Yeast makes the dough rise overnight.")
    document.add_heading("Oven", level=2)
    document.add_paragraph("Bake the loaf at a high heat for forty minutes.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "rye flour"
    table.cell(0, 1).text = "500 grams"
    document.save(str(path))


def make_folder(root: Path) -> Path:
    folder = root / "docs"
    folder.mkdir()
    write_html(folder / "tides.html")
    write_pdf(folder / "glaciers.pdf", PAGES)
    write_docx(folder / "bread.docx")
    (folder / "plain.txt").write_text("Plain text about comets.", encoding="utf-8")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntruncated")
    (folder / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip archive")
    return folder


def passages(memory: Memory, query: str) -> list[tuple[str, str, str | None, dict[str, object]]]:
    found = memory.retrieve(query, top_k=50, method="bm25")[0].passages
    return [(p.id, p.text, p.title, p.metadata) for p in found]


def test_a_folder_of_html_pdf_and_docx_indexes_into_readable_passages(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=64)) as memory:
        report = memory.sync(folder)
        assert set(report.skipped) == {str(folder / "broken.pdf"), str(folder / "broken.docx")}
        assert "cannot be read as PDF" in report.skipped[str(folder / "broken.pdf")]
        assert "cannot be read as DOCX" in report.skipped[str(folder / "broken.docx")]
        assert sorted(memory.documents()) == [
            "docs/bread.docx", "docs/glaciers.pdf#page=1", "docs/glaciers.pdf#page=2", "docs/glaciers.pdf#page=3",
            "docs/plain.txt", "docs/tides.html",
        ]  # fmt: skip

        html = [p for p in passages(memory, "moon oceans bulges spring tides") if p[0] == "docs/tides.html"]
        assert len(html) == 1
        _, text, title, _ = html[0]
        assert title == "Tide Notes"
        assert "The moon pulls the oceans into two bulges." in text
        assert "Spring tides come at new and full moon, when sun and moon line up." in text
        assert "Tides of the sea" in text  # the article's own header stays
        assert not [junk for junk in JUNK if junk in text], text

        by_id = {p[0]: p for p in passages(memory, "moraines ice stopped glaciers valleys drumlin")}
        assert by_id["docs/glaciers.pdf#page=2"][1] == PAGES[1]
        assert by_id["docs/glaciers.pdf#page=2"][3]["page"] == 2
        assert by_id["docs/glaciers.pdf#page=1"][3]["page"] == 1
        assert by_id["docs/glaciers.pdf#page=1"][2] == "Glacier Report"
        third = [p for i, p in by_id.items() if i.startswith("docs/glaciers.pdf#page=3#")]
        assert len(third) >= 2 and all(p[3]["page"] == 3 for p in third)  # a long page: passages keep the page
        assert all("Drumlin" in p[1] and "Moraines" not in p[1] for p in third)  # chunks never mix pages

        (bread,) = [p for p in passages(memory, "yeast dough loaf rye flour") if p[0] == "docs/bread.docx"]
        assert bread[1].splitlines() == [
            "Bread Baking", "Yeast makes the dough rise overnight.", "Oven",
            "Bake the loaf at a high heat for forty minutes.", "rye flour | 500 grams",
        ]  # fmt: skip
        assert bread[2] == "Bread Baking"


def test_html_without_article_drops_site_chrome_and_takes_the_h1_as_title(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    page = (
        "<html><meta charset='latin-1'><body><header>Menu NAVJUNK</header><div role='navigation'>NAVJUNK</div>"
        "<h1>Café Ölmühle</h1><div>Opened in 1901 beside the <i>river</i>.</div><footer>FOOTERJUNK</footer></body>"
        "</html>"
    )
    (tmp_path / "site" / "page.htm").write_bytes(page.encode("latin-1"))  # decoded by its own charset
    collected = collect([str(tmp_path / "site")])
    assert collected.skipped == {}
    (doc,) = collected.documents
    assert doc.title == "Café Ölmühle"
    assert doc.text == "Café Ölmühle\nOpened in 1901 beside the river."


def test_control_characters_in_a_document_do_not_refuse_the_folder(tmp_path: Path) -> None:
    """A NUL byte that html.parser passes on (or an unmapped PDF glyph) used to refuse the whole index call."""
    folder = tmp_path / "marsh"
    folder.mkdir()
    (folder / "birds.html").write_bytes(b"<title>Ma\x00rsh</title><p>Salt\x00 marsh &#xD800; herons\x07 wade.</p>")
    (folder / "other.txt").write_text("Other notes about dunes.", encoding="utf-8")
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=64)) as memory:
        report = memory.sync(folder)
        assert report.added == ["marsh/birds.html", "marsh/other.txt"] and report.skipped == {}
        (birds,) = [p for p in passages(memory, "salt marsh herons") if p[0] == "marsh/birds.html"]
        assert birds[1] == "Salt marsh \ufffd herons wade." and birds[2] == "Marsh"


def test_encrypted_pdf_is_named_and_one_that_opens_without_a_password_is_read(tmp_path: Path) -> None:
    import pypdf

    folder = tmp_path / "pdfs"
    folder.mkdir()
    write_pdf(tmp_path / "plain.pdf", PAGES[:2])
    for name, user in (("locked.pdf", "secret"), ("open.pdf", "")):
        writer = pypdf.PdfWriter(clone_from=str(tmp_path / "plain.pdf"))
        writer.encrypt(user_password=user, owner_password="owner", algorithm="RC4-128")
        writer.write(str(folder / name))
    collected = collect([str(folder)])
    assert [d.id for d in collected.documents] == ["pdfs/open.pdf#page=1", "pdfs/open.pdf#page=2"]
    assert "needs a password" in collected.skipped[str(folder / "locked.pdf")]


def test_without_the_docs_extra_each_document_is_skipped_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_folder(tmp_path)
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=64)) as memory:
        memory.sync(folder)
        stored = sorted(memory.documents())
        for module in ("bs4", "pypdf", "docx"):
            monkeypatch.setitem(sys.modules, module, None)  # `import` of it now raises ImportError
        report = memory.sync(folder)
        for name, package in (("tides.html", "beautifulsoup4"), ("glaciers.pdf", "pypdf"), ("bread.docx", "docx")):
            reason = report.skipped[str(folder / name)]
            assert package in reason and "pip install 'engram[docs]'" in reason, reason
        assert report.deleted == []  # the files are still there: their documents (all PDF pages) are kept
        assert sorted(memory.documents()) == stored


def test_cli_index_names_the_files_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = make_folder(tmp_path)
    mem = str(tmp_path / "m")
    assert main(["index", str(folder), "--memory", mem, "--embedder", "hash"]) == 0
    captured = capsys.readouterr()
    skipped = [line for line in captured.err.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 2, captured.err
    assert any(str(folder / "broken.pdf") in line and "cannot be read as PDF" in line for line in skipped)
    assert any(str(folder / "broken.docx") in line and "cannot be read as DOCX" in line for line in skipped)
    assert "Traceback" not in captured.err
    for doc_id in ("docs/tides.html", "docs/bread.docx", "docs/glaciers.pdf#page=2", "docs/plain.txt"):
        assert f"added    {doc_id}" in captured.out
    args = ["--memory", mem, "--embedder", "hash", "--method", "bm25", "--json"]
    assert main(["retrieve", "Where did the ice stop?", *args]) == 0
    top = json.loads(capsys.readouterr().out)["passages"][0]
    assert top["id"] == "docs/glaciers.pdf#page=2" and top["metadata"]["page"] == 2


def test_sync_mirrors_edits_and_deletions_of_documents(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    with Memory(tmp_path / "m", embedder=HashEmbedder(dim=64)) as memory:
        memory.sync(folder)
        write_html(folder / "tides.html", first="The lunar gravity")
        report = memory.sync(folder)
        assert report.updated == ["docs/tides.html"] and report.added == [] and report.deleted == []
        (text,) = [p[1] for p in passages(memory, "lunar gravity oceans") if p[0] == "docs/tides.html"]
        assert "The lunar gravity pulls the oceans" in text and "The moon pulls" not in text

        write_pdf(folder / "glaciers.pdf", PAGES[:2])  # the long third page is gone
        assert memory.sync(folder).deleted == ["docs/glaciers.pdf#page=3"]
        assert not [p for p in passages(memory, "drumlin till plain") if "page=3" in p[0] or "Drumlin" in p[1]]

        (folder / "glaciers.pdf").write_bytes(b"%PDF-1.4 half-written")  # still there, unreadable: kept
        report = memory.sync(folder)
        assert str(folder / "glaciers.pdf") in report.skipped and report.deleted == []

        (folder / "glaciers.pdf").unlink()
        assert memory.sync(folder).deleted == ["docs/glaciers.pdf#page=1", "docs/glaciers.pdf#page=2"]
        assert not [p for p in passages(memory, "moraines glaciers valleys") if "glaciers.pdf" in p[0]]
        assert not [i for i in memory.documents() if "glaciers.pdf" in i]


def test_a_pdf_given_by_itself_is_refused_when_another_file_of_that_name_was_indexed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_pdf(tmp_path / "a" / "report.pdf", PAGES[:1])
    write_pdf(tmp_path / "b" / "report.pdf", PAGES[1:2])
    mem = str(tmp_path / "m")
    assert main(["index", str(tmp_path / "a" / "report.pdf"), "--memory", mem, "--embedder", "hash"]) == 0
    assert "added    report.pdf#page=1" in capsys.readouterr().out
    assert main(["index", str(tmp_path / "b" / "report.pdf"), "--memory", mem, "--embedder", "hash"]) == 1
    err = capsys.readouterr().err
    assert "was read from" in err and "same file name" in err


def test_a_document_over_the_size_limit_is_skipped_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file-size cap of text files ($ENGRAM_MAX_FILE_MB) holds for HTML, PDF and DOCX too."""

    folder = tmp_path / "big"
    folder.mkdir()
    write_html(folder / "page.html")
    (folder / "small.txt").write_text("A small note.", encoding="utf-8")
    monkeypatch.setenv("ENGRAM_MAX_FILE_MB", str((folder / "page.html").stat().st_size / 2e6))
    found = collect([str(folder)])
    assert [d.id for d in found.documents] == ["big/small.txt"]
    assert "larger than" in found.skipped[str(folder / "page.html")]

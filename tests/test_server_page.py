"""The web page in headless Chromium (Debian's chromium + chromium-driver, driven by Selenium) against the real
server with a scripted LLM: name a memory, add documents with the keyboard and by upload, watch the jobs,
ask, see the passages, the trace (kept and dropped facts, seeds) and the graph picture, delete a document.
Screenshots go to the test's tmp dir (and to $ENGRAM_SCREENSHOTS when set)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
if not (CHROMIUM and DRIVER):
    pytest.skip(
        "no headless browser here: install Debian's chromium and chromium-driver (scripts/setup.sh does, as root)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra has it)")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from fake_openai import FakeOpenAI, reply, task_of  # noqa: E402
from helpers import DOCS, EXTRACTIONS  # noqa: E402
from server_helpers import hash_settings, serve  # noqa: E402

BY_TEXT = {d.text: e for d, e in zip(DOCS, EXTRACTIONS)}


def scripted(request: dict[str, Any]) -> Any:
    """Hand-written extractions by passage text; the filter keeps candidates 1 and 2; the reader says Lyon."""
    text = " ".join(str(m.get("content", "")) for m in request.get("messages", []))
    found = next((e for t, e in BY_TEXT.items() if t in text), {"entities": [], "triples": []})
    task = task_of(request)
    if task == "ner":
        return reply(json.dumps({"entities": found["entities"]}))
    if task == "triples":
        return reply(json.dumps({"triples": found["triples"]}))
    if task == "filter":
        return reply(json.dumps({"facts": [1, 2]}))
    return reply("The founder of Acme Tools was born in Lyon.\nAnswer: Lyon") if task == "reader" else None


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1440,1100"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def until(driver: Any, check: Callable[[Any], Any], timeout: float = 30) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(check)


def texts(driver: Any, css: str) -> list[str]:
    """The text of every match, read in one script (lists are re-rendered while the test watches)."""
    script = "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)"
    return list(driver.execute_script(script, css))


def shoot(driver: Any, path: Path, width: int = 1440) -> None:
    """A screenshot of the whole page (the window grows to the page's height first)."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(width, max(900, min(height + 140, 4000)))
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    extra = os.environ.get("ENGRAM_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / path.name)


GRAPH_FACTS = r"""
const cy = state.cy;
const box = (n) => n.renderedBoundingBox({ includeNodes: false, includeEdges: false, includeLabels: true });
const shown = cy.nodes().filter((n) => Number(n.style("text-opacity")) > 0 && n.data("label"));
const comps = cy.elements().components();
const reached = new Set([...document.querySelectorAll("#passages .meta")]
  .map((m) => m.textContent.match(/^\[(.*)\] score (\S+)$/)).filter((m) => m && Number(m[2]) > 0)
  .map((m) => "passage:" + m[1]));
const withSeed = (n) => comps.some((c) => c.contains(n) && c.nodes("[role = 'seed']").length > 0);
const reaches = (n) => comps.some((c) => c.contains(n) && c.nodes("[role = 'top']").length > 0);
return {
  nodes: cy.nodes().length, zoom: cy.zoom(),
  labels: shown.map((n) => { const b = box(n); return [n.id(), b.x1, b.y1, b.x2, b.y2]; }),
  widest: Math.max(...cy.nodes().map((n) => n.renderedWidth())),
  font: Math.max(...cy.nodes().map((n) => parseFloat(n.renderedStyle("font-size")))),
  lonely: cy.nodes("[role = 'seed']").filter((n) => !reaches(n)).map((n) => n.id()),
  unreached: cy.nodes("[role = 'top']").filter((n) => reached.has(n.id()) && !withSeed(n)).map((n) => n.id()),
};
"""


def graph_facts(driver: Any) -> dict[str, Any]:
    """What cytoscape drew: the boxes of the labels it shows, node sizes on screen, seeds with no path to a
    retrieved passage, and retrieved passages the walk reached (score > 0) with no path to a seed."""
    return dict(driver.execute_script(GRAPH_FACTS))


def assert_labels_apart(facts: dict[str, Any]) -> None:
    boxes = facts["labels"]
    assert len(boxes) >= max(2, facts["nodes"] // 2), facts  # most labels are shown ...
    for i, (a, *p) in enumerate(boxes):  # ... and none of them overlaps another
        for b, *q in boxes[i + 1 :]:
            apart = p[2] <= q[0] or q[2] <= p[0] or p[3] <= q[1] or q[3] <= p[1]
            assert apart, f"the labels of {a} and {b} overlap: {p} {q}"


def assert_fits(driver: Any, width: int) -> None:
    """No sideways scroll, and every visible button and field lies wholly inside the window."""
    got = driver.execute_script(
        "return [window.innerWidth, document.documentElement.scrollWidth, [...document.querySelectorAll("
        "'button, input, select, textarea')].filter((e) => e.offsetParent && e.type !== 'hidden' && "
        "e.getBoundingClientRect().width > 2).map((e) => { const r = e.getBoundingClientRect(); "
        "return [e.id || e.textContent || e.type, r.left, r.right]; })]"
    )
    inner, scroll, controls = got
    assert inner == width and scroll <= inner, (inner, scroll)
    cut = [c for c in controls if c[1] < 0 or c[2] > inner + 0.5]
    assert not cut, f"cut at the window's edge: {cut}"


def add_by_keyboard(driver: Any, doc_id: str, title: str, text: str) -> None:
    box = driver.find_element(By.ID, "doc-id")
    box.click()
    box.send_keys(doc_id, Keys.TAB, title, Keys.TAB, text, Keys.TAB, Keys.ENTER)  # tab to the button, press it


def test_the_page_adds_asks_and_draws_the_graph(
    tmp_path: Path, fake_llm: FakeOpenAI, browser: Any
) -> None:
    fake_llm.handler = scripted
    settings = hash_settings(root=tmp_path / "root", llm_base_url=fake_llm.base_url, llm_model="fake-model")
    with serve(settings) as server:
        browser.get(server.url + "/")
        until(browser, lambda d: "No memory yet" in d.find_element(By.ID, "status").text)
        icon = browser.execute_async_script(  # the page has an icon, and it is an image the browser can draw
            "const done = arguments[0], link = document.querySelector('link[rel~=icon]');"
            "if (!link) return done(null); const img = new Image();"
            "img.onload = () => done([link.href.slice(0, 19), img.naturalWidth]); img.onerror = () => done('broken');"
            "img.src = link.href;"
        )
        assert icon and icon[0] == "data:image/svg+xml," and icon[1] > 0, icon
        browser.find_element(By.ID, "new-memory").send_keys("notes", Keys.ENTER)
        for doc in DOCS[:4]:
            add_by_keyboard(browser, doc.id, doc.title or "", doc.text)
            until(browser, lambda d, i=doc.id: i in texts(d, "#documents li span"))
        upload = tmp_path / "oslo.md"
        upload.write_text(DOCS[4].text, encoding="utf-8")
        browser.find_element(By.ID, "files").send_keys(str(upload))
        browser.find_element(By.CSS_SELECTOR, "#upload-form button").click()
        until(browser, lambda d: "oslo.md" in texts(d, "#documents li span"))
        until(browser, lambda d: texts(d, "#jobs li") and all(": done" in t for t in texts(d, "#jobs li")))
        assert len(texts(browser, "#jobs li")) == 5
        shoot(browser, tmp_path / "1-added.png")

        question = browser.find_element(By.ID, "question")
        question.send_keys("Where was the founder of Acme Tools born?", Keys.ENTER)
        until(browser, lambda d: d.find_element(By.ID, "graph").get_attribute("data-nodes"))
        passages = texts(browser, "#passages li")
        assert passages and "Acme Tools" in passages[0] + passages[1]
        kept, dropped = texts(browser, "#facts tr.kept"), texts(browser, "#facts tr.dropped")
        assert len(kept) == 2 and dropped  # the filter kept candidates 1 and 2 of the five
        assert "the recognition filter ran" in browser.find_element(By.ID, "filter-note").text
        seeds = texts(browser, "#seeds li")
        assert seeds and all("(" in s for s in seeds)
        graph = browser.find_element(By.ID, "graph")
        assert int(graph.get_attribute("data-nodes")) >= 4 and int(graph.get_attribute("data-edges")) >= 3
        assert graph.find_elements(By.TAG_NAME, "canvas")  # cytoscape drew it
        drawn = graph_facts(browser)
        assert_labels_apart(drawn)
        assert not drawn["lonely"] and not drawn["unreached"], drawn  # seeds are joined to what they reached
        answer_button = browser.find_element(By.ID, "answer-btn")  # an LLM is configured: answering is offered
        assert answer_button.is_enabled() and not browser.find_element(By.ID, "answer-why").is_displayed()
        shoot(browser, tmp_path / "2-asked.png")

        browser.find_element(By.ID, "answer-btn").click()
        until(browser, lambda d: "Lyon" in d.find_element(By.ID, "answer").text)
        browser.find_element(By.CSS_SELECTOR, "button[aria-label='delete bob']").click()
        until(browser, lambda d: "Deleted bob." in d.find_element(By.ID, "status").text)
        assert "bob" not in texts(browser, "#documents li span")
        assert browser.find_element(By.ID, "doc-count").text == "(4)"
        assert not any("Zenith Foods" in p for p in texts(browser, "#passages li"))  # the results were re-run
        shoot(browser, tmp_path / "3-answered.png")


POEM = "A poem about Lyon.\nLine two of the poem.\nLine three."
TINY = {"id": "t", "text": "Alice Moreau founded Acme Tools."}
TINY_EXTRACTION = {
    "id": "t", "entities": ["Alice Moreau", "Acme Tools"], "triples": [["Alice Moreau", "founded", "Acme Tools"]]
}


def test_the_page_without_an_llm_on_a_narrow_window_and_two_memories(tmp_path: Path, browser: Any) -> None:
    """No LLM: answering is disabled with the reason. Stats show above a long document list; passage text keeps
    its line breaks; graph labels do not overlap; switching memories clears the results; a 3-node graph is not
    blown up; at 420 px nothing scrolls sideways or is cut."""
    docs = [{"id": d.id, "title": d.title, "text": d.text} for d in DOCS] + [{"id": "poem", "text": POEM}]
    long_title = "A filler note of the long list, number {}"  # long labels, which must not overlap
    docs += [{"id": f"filler/{i:02d}", "title": long_title.format(i), "text": f"Filler note {i}."} for i in range(40)]
    extractions = [*EXTRACTIONS] + [{"id": d["id"], "entities": [], "triples": []} for d in docs[len(DOCS) :]]
    with serve(hash_settings(root=tmp_path / "root")) as server, server.client() as http:
        for name, body in (("big", {"documents": docs, "extractions": extractions}),
                           ("tiny", {"documents": [TINY], "extractions": [TINY_EXTRACTION]})):
            assert http.post(f"/v1/memories/{name}/documents", json=body).status_code == 200
        browser.set_window_size(1280, 900)
        browser.get(server.url + "/")
        until(browser, lambda d: len(texts(d, "#documents li span")) == 46 and texts(d, "#stats dd"))
        assert browser.find_element(By.ID, "memory").get_attribute("value") == "big"
        place = browser.execute_script(
            "const s = document.getElementById('stats').getBoundingClientRect(),"
            " l = document.getElementById('documents').getBoundingClientRect();"
            "return [s.top, s.bottom, l.top, window.innerHeight]"
        )
        assert place[0] < place[2] and place[1] <= place[3], place  # stats above the list, in the first screen
        button = browser.find_element(By.ID, "answer-btn")
        assert not button.is_enabled()
        why = browser.find_element(By.ID, "answer-why")
        assert why.is_displayed() and "No LLM is configured" in why.text and "--llm-base-url" in why.text

        top_k = browser.find_element(By.ID, "top-k")
        top_k.clear()
        top_k.send_keys("50")
        browser.find_element(By.ID, "question").send_keys("Where was the founder of Acme Tools born?", Keys.ENTER)
        until(browser, lambda d: d.find_element(By.ID, "graph").get_attribute("data-nodes"))
        style = browser.execute_script(
            "return [...document.querySelectorAll('#passages .text')].map((e) => getComputedStyle(e).whiteSpace)"
        )
        assert len(style) == 46 and set(style) == {"pre-wrap"}, style
        poem = browser.execute_script(
            "return [...document.querySelectorAll('#passages li')].find((li) => li.textContent.includes('[poem]'))"
            ".querySelector('.text').innerText"
        )
        assert poem == POEM  # the line breaks are kept on screen
        drawn = graph_facts(browser)
        assert_labels_apart(drawn)
        assert not drawn["lonely"] and not drawn["unreached"], drawn  # seeds are joined to what they reached
        shoot(browser, tmp_path / "4-no-llm.png", 1280)

        Select(browser.find_element(By.ID, "memory")).select_by_value("tiny")
        until(browser, lambda d: texts(d, "#documents li span") == ["t"])
        left = browser.execute_script(
            "const g = document.getElementById('graph');"
            "return [document.getElementById('passages').children.length, document.querySelector('#facts tbody')"
            ".children.length, document.getElementById('seeds').children.length, g.dataset.nodes ?? null,"
            " g.querySelectorAll('canvas').length, document.getElementById('answer').hidden]"
        )
        assert left == [0, 0, 0, None, 0, True], left  # nothing of memory big is left on the page
        assert "passage" not in browser.find_element(By.ID, "status").text  # nor its "46 passage(s) by ..."

        question = browser.find_element(By.ID, "question")
        question.clear()
        question.send_keys("Who founded Acme Tools?", Keys.ENTER)
        until(browser, lambda d: d.find_element(By.ID, "graph").get_attribute("data-nodes") == "3")
        drawn = graph_facts(browser)
        assert drawn["nodes"] == 3 and drawn["widest"] <= 40 and drawn["font"] <= 14, drawn  # reading size
        assert_labels_apart(drawn)
        shoot(browser, tmp_path / "5-tiny.png", 1280)

        browser.set_window_size(420, 900)
        until(browser, lambda d: d.execute_script("return window.innerWidth") == 420)
        assert_fits(browser, 420)
        shoot(browser, tmp_path / "6-narrow.png", 420)
        assert_fits(browser, 420)

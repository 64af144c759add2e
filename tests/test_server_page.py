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
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

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


def shoot(driver: Any, path: Path) -> None:
    """A screenshot of the whole page (the window grows to the page's height first)."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1440, max(900, min(height + 140, 4000)))
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    extra = os.environ.get("ENGRAM_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / path.name)


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
        shoot(browser, tmp_path / "2-asked.png")

        browser.find_element(By.ID, "answer-btn").click()
        until(browser, lambda d: "Lyon" in d.find_element(By.ID, "answer").text)
        browser.find_element(By.CSS_SELECTOR, "button[aria-label='delete bob']").click()
        until(browser, lambda d: "Deleted bob." in d.find_element(By.ID, "status").text)
        assert "bob" not in texts(browser, "#documents li span")
        assert browser.find_element(By.ID, "doc-count").text == "(4)"
        assert not any("Zenith Foods" in p for p in texts(browser, "#passages li"))  # the results were re-run
        shoot(browser, tmp_path / "3-answered.png")

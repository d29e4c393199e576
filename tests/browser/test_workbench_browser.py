"""The workbench page in a real headless Chromium (Debian's chromium + chromium-driver, driven
by Selenium): a deep link runs its query, the columns show every mode, a click stores a
judgment (checked through the API), the keyboard judges too, and tune runs from the page, its
writes carrying the run's token; and a hostile page on another origin (and one reached through
a rebinding host name) cannot write through the browser.

Without Chromium the test skips locally and fails when ``CI`` is set (scripts/setup installs
the packages when run as root)."""

from __future__ import annotations

import os
import urllib.parse
from contextlib import contextmanager

import pytest

from hybrid_qpr import resources
from hybrid_qpr.testing.web import html_site
from hybrid_qpr.testing.workbench import call, chromium_problem, examples_local_index, headless_chromium, served

pytestmark = pytest.mark.browser
pytest.importorskip("starlette")  # the served workbench (the serve extra)
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def browser():
    problem = chromium_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem + " (CI is set, so the browser test must not skip)")
        pytest.skip(problem)
    with headless_chromium("--host-resolver-rules=MAP evil.example 127.0.0.1") as driver:  # a rebinding name
        yield driver



def test_page_passes_every_declared_option_and_shows_the_request_it_got(browser, tmp_path, committed_encoder):
    """A search option the page has no control for (``depth``, ``autocut``: declared once in
    ``search_request.SEARCH_OPTIONS``) passes from the page's address to the API, and the
    status line's tooltip shows the request the search used; the untuned label reads the fusion in
    use and where it comes from (here the model's) from ``/api/health``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from hybrid_qpr.search_request import DEFAULT_ALPHA, DEFAULT_FUSION

    index = examples_local_index(tmp_path / "idx", committed_encoder)
    wait = WebDriverWait(browser, 60)
    with served(index, committed_encoder, tmp_path / "judgments", index="examples", kind="local") as url:
        browser.get(f"{url}/?" + urllib.parse.urlencode({"q": "cheap flights to europe", "k": 5, "depth": 45,
                                                          "autocut": 1}))
        wait.until(lambda d: "depth 45" in d.find_element(By.ID, "status").text)
        shown = browser.find_element(By.ID, "status").get_attribute("title").splitlines()
        assert "depth: 45" in shown and "autocut: 1" in shown and "top_k: 5" in shown, shown
        carried = committed_encoder.config.get("fusion_defaults")  # an index with none of its own fuses as its model says
        assert (f"fusion {carried['fusion']} α={carried['alpha']} (the model's, untuned)" if carried else
                f"untuned ({DEFAULT_FUSION} α={DEFAULT_ALPHA})") in browser.find_element(By.ID, "health").text
        assert "depth=45" in browser.current_url and "autocut=1" in browser.current_url  # kept in the link
        assert "reranker" not in browser.find_element(By.ID, "health").text
    bundled = resources.model_dir().parent / "reranker-minilm-l6-int8"
    with served(index, committed_encoder, tmp_path / "judgments", index="examples", kind="local",
                reranker=bundled) as url:
        browser.get(f"{url}/")  # the header names the cross-encoder that re-reads the hits, and its depth
        wait.until(lambda d: f"reranker {bundled.name} (top 20)" in d.find_element(By.ID, "health").text)

def test_page_queries_judges_and_tunes(browser, tmp_path, committed_encoder):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    index = examples_local_index(tmp_path / "idx", committed_encoder)
    wait = WebDriverWait(browser, 60)
    with served(index, committed_encoder, tmp_path / "judgments", index="examples", kind="local",
                min_tune_queries=2, index_writes=True) as url:
        query = "i can't remember my netflix login"
        browser.get(f"{url}/?" + urllib.parse.urlencode({"q": query, "k": 5}))
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".column .hit")) == 20)
        columns = browser.find_elements(By.CSS_SELECTOR, ".column")
        assert [c.get_attribute("data-mode") for c in columns] == ["bm25", "knn", "hybrid", "rescore"]
        assert browser.find_element(By.ID, "q").get_attribute("value") == query
        assert "270 documents" in browser.find_element(By.ID, "health").text
        assert browser.find_element(By.ID, "writes").text.startswith("Index writes on")
        hybrid = browser.find_element(By.CSS_SELECTOR, '.column[data-mode="hybrid"]')
        first = hybrid.find_element(By.CSS_SELECTOR, ".hit")
        assert "BM25" in first.text and "kNN" in first.text
        assert len(first.find_elements(By.CSS_SELECTOR, ".move")) == 3  # its rank in the three other lists
        _, api_hits = call(f"{url}/api/search?" + urllib.parse.urlencode({"q": query, "k": 5}))
        assert [h.get_attribute("data-id") for h in hybrid.find_elements(By.CSS_SELECTOR, ".hit")] == \
            [h["id"] for h in api_hits["hits"]]

        # a click on "Relevant" stores the judgment and marks the hit in every column
        doc_id = first.get_attribute("data-id")
        first.find_element(By.CSS_SELECTOR, 'button.judge[data-relevance="1"]').click()
        wait.until(lambda d: "judged-1" in first.get_attribute("class"))
        _, stored = call(f"{url}/api/judgments")
        assert [(j["id"], j["relevance"]) for q in stored["queries"] for j in q["judgments"]] == [(doc_id, 1)]
        same_elsewhere = browser.find_elements(By.CSS_SELECTOR, f'.hit[data-id="{doc_id}"]')
        assert all("judged-1" in h.get_attribute("class") for h in same_elsewhere)

        # keyboard: j moves to the next hit of the column, 0 judges it not relevant
        first.click()
        browser.switch_to.active_element.send_keys("j")
        focused = browser.switch_to.active_element
        assert focused.get_attribute("class").startswith("hit")
        second_id = focused.get_attribute("data-id")
        focused.send_keys("0")
        wait.until(lambda d: "judged-0" in focused.get_attribute("class"))

        # a second query typed into the box (Enter runs it), judged by click
        box = browser.find_element(By.ID, "q")
        box.clear()
        box.send_keys("cheapest way to fly to lisbon", Keys.ENTER)
        wait.until(lambda d: "lisbon" in d.current_url)
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "4 lists of 5"))
        target = browser.find_element(By.CSS_SELECTOR, '.column[data-mode="knn"] .hit')
        target.find_element(By.CSS_SELECTOR, 'button.judge[data-relevance="2"]').click()
        wait.until(lambda d: "judged-2" in target.get_attribute("class"))
        _, stored = call(f"{url}/api/judgments")
        assert stored["count"] == 3 and stored["judged_queries"] == 2
        assert {j["id"] for q in stored["queries"] for j in q["judgments"]} >= {doc_id, second_id}

        # fusion control re-queries live
        from selenium.webdriver.support.ui import Select

        Select(browser.find_element(By.ID, "fusion")).select_by_value("minmax")
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "hybrid: minmax"))
        assert "fusion=minmax" in browser.current_url

        # tune from the page: the before/after table appears and the fusion is stored
        browser.find_element(By.ID, "tune").click()
        wait.until(ec.visibility_of_element_located((By.ID, "tune-result")))
        rows = browser.find_elements(By.CSS_SELECTOR, "#tune-result tbody tr")
        assert [r.get_attribute("data-run") for r in rows] == ["bm25", "knn", "hybrid before", "hybrid after"]
        assert "stored as the index default" in browser.find_element(By.ID, "tune-status").text
        _, health = call(f"{url}/api/health")
        assert health["fusion_defaults"].get("fusion") in ("rrf", "minmax", "zscore", "l2")
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors

        # the page's own writes carried the token: the same write from the page without it is refused
        refused = browser.execute_async_script(
            "const done = arguments[arguments.length - 1]; fetch('/api/judgments', {method: 'POST', headers: "
            "{'Content-Type': 'application/json'}, body: JSON.stringify({query: 'q', id: arguments[0], relevance: 1})})"
            ".then(r => r.json().then(b => done([r.status, b.error])), e => done([0, String(e)]));", doc_id)
        assert refused[0] == 403 and "X-Workbench-Token" in refused[1], refused


@contextmanager
def hostile_site(html: str):
    """Another origin (its own port) serving ``html`` at /: the page of a site the user visits."""
    with html_site(html) as host:
        yield f"http://{host}"


def test_other_pages_cannot_write_through_the_browser(browser, tmp_path, committed_encoder):
    """A page on another origin tries what it can: a text/plain form post (a JSON-looking body),
    a no-cors fetch, a JSON fetch with a guessed token (needs a preflight, never granted); then
    the workbench is loaded under a rebinding name. Nothing is stored, nothing is readable."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    index = examples_local_index(tmp_path / "idx", committed_encoder)
    wait = WebDriverWait(browser, 60)
    with served(index, committed_encoder, tmp_path / "judgments", index="examples", kind="local",
                min_tune_queries=1) as url:
        browser.get(url + "/")  # the read-only default: the page says so
        wait.until(ec.text_to_be_present_in_element((By.ID, "writes"), "Index writes off"))
        judgment = '{"query": "q", "id": "amazon-email-0", "relevance": 1}'
        page = f"""<!doctype html><title>hostile</title>
<form id="form" method="POST" enctype="text/plain" action="{url}/api/judgments">
<input type="hidden" name='{judgment[:-1]}, "x": "' value='"}}'></form>
<script>
async function attack() {{
  const out = {{}};
  try {{ await fetch("{url}/api/judgments", {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}},
                                           body: '{judgment}'}}); out.nocors = "sent"; }}
  catch (e) {{ out.nocors = "blocked"; }}
  try {{ const r = await fetch("{url}/api/judgments", {{method: "POST", headers: {{"Content-Type": "application/json",
                                 "X-Workbench-Token": "guessed"}}, body: '{judgment}'}}); out.json = r.status; }}
  catch (e) {{ out.json = "blocked"; }}
  try {{ const r = await fetch("{url}/api/session"); out.session = await r.text(); }}
  catch (e) {{ out.session = "blocked"; }}
  return out;
}}
</script>"""
        with hostile_site(page) as site:
            browser.get(site + "/")
            results = browser.execute_async_script("attack().then(arguments[0]);")
            # the no-cors post still reaches the server (which refuses it: nothing is stored, below),
            # but Cross-Origin-Resource-Policy withholds even its opaque answer, so the fetch rejects
            assert results == {"nocors": "blocked", "json": "blocked", "session": "blocked"}, results
            browser.find_element(By.ID, "form").submit()
            wait.until(lambda d: "/api/judgments" in d.current_url)
            assert "cross-origin write refused" in browser.page_source
        assert call(f"{url}/api/judgments")[1]["count"] == 0  # not one of them was stored

        port = url.rsplit(":", 1)[1]
        browser.get(f"http://evil.example:{port}/")  # resolves to the workbench, under another name
        assert "not a name of this workbench" in browser.page_source and "session" not in browser.page_source
        _, status = call(f"{url}/api/judgments")
        assert status["count"] == 0


# Every element of a column, measured in the page: its right edge beyond its column's, or
# content wider than itself (text cut at the right edge), is an overflow.
OVERFLOWS = """
const out = [];
for (const column of document.querySelectorAll(".column")) {
  const right = column.getBoundingClientRect().right + 1;
  for (const node of column.querySelectorAll("*")) {
    const box = node.getBoundingClientRect();
    if (box.width === 0) continue;  // not shown (a closed toggle's content)
    if (box.right > right || node.scrollWidth > node.clientWidth + 1 && getComputedStyle(node).overflowX !== "hidden")
      out.push(`${column.dataset.mode}: <${node.tagName.toLowerCase()} class="${node.className}"> ${node.textContent.slice(0, 60)}`);
  }
}
if (document.documentElement.scrollWidth > window.innerWidth) out.push(`the page scrolls sideways (${document.documentElement.scrollWidth}px)`);
return out;
"""
FIFTH_HIT_BOTTOMS = """
return [...document.querySelectorAll(".column")].map((column) => {
  const hits = column.querySelectorAll(".hit");
  return [column.dataset.mode, hits.length, hits.length >= 5 ? hits[4].getBoundingClientRect().bottom : null];
});
"""


def test_cards_with_long_metadata_fit_five_hits_a_column_and_never_overflow(browser, tmp_path, committed_encoder):
    """An FAQ's hits: a title that repeats the text, an answer of hundreds of words, a URL with
    no place to break, a word longer than a column. In a 1,400 x 1,000 window five hits of each
    column are in view, nothing is cut at a column's right edge, the field chosen in "Show"
    takes three lines at most, and the card's toggle holds every field whole."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.types import Document

    words = "open the account page, choose security, then reset the password and sign in again".split()
    answer = " ".join(words[i % len(words)] for i in range(400))
    url_like = "https://support.example.com/" + "very-long-path-segment-" * 12 + "?ref=" + "x" * 80
    docs = [Document(f"faq-{i}", f"how do i reset my password on device {i} " + ("supercalifragilistic" * 4 if i % 3 == 1
                                                                                  else ""),
                     {"title": f"How do I reset my password on device {i}", "answer": answer, "url": url_like,
                      "topic": "account"})
            for i in range(40)]
    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    index.ingest(docs, committed_encoder, show_progress=False)
    wait = WebDriverWait(browser, 60)
    browser.set_window_size(1400, 1000)
    with served(index, committed_encoder, tmp_path / "judgments", index="faq", kind="local") as url:
        browser.get(f"{url}/?" + urllib.parse.urlencode({"q": "reset my password", "k": 5}))
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".column .hit")) == 20)
        height = browser.execute_script("return window.innerHeight")
        assert height >= 800, height  # a 1,000-pixel window less its own bars
        bottoms = browser.execute_script(FIFTH_HIT_BOTTOMS)
        assert len(bottoms) == 4 and all(count == 5 and bottom <= height for _, count, bottom in bottoms), (bottoms, height)
        assert browser.execute_script(OVERFLOWS) == []
        first = browser.find_element(By.CSS_SELECTOR, '.column[data-mode="hybrid"] .hit')
        assert answer[:50] not in first.text  # the answer is behind the toggle
        toggle = first.find_element(By.CSS_SELECTOR, "details.fields")
        assert toggle.find_element(By.TAG_NAME, "summary").text == "4 fields"
        toggle.find_element(By.TAG_NAME, "summary").click()
        assert answer[-40:] in toggle.text and url_like in toggle.text.replace("\n", "")
        assert browser.execute_script(OVERFLOWS) == []  # the opened toggle wraps its URL too

        # "Show" puts one field on every card, three lines at most, and keeps it in the page's link
        Select(browser.find_element(By.ID, "show")).select_by_value("answer")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".hit .shown")) == 20)
        shown = browser.find_element(By.CSS_SELECTOR, ".hit .shown")
        line = float(browser.execute_script("return parseFloat(getComputedStyle(arguments[0]).lineHeight)", shown))
        assert shown.size["height"] <= 3 * line + 2 and shown.text.startswith("open the account page")
        assert "show=answer" in browser.current_url
        assert browser.execute_script(OVERFLOWS) == []
        Select(browser.find_element(By.ID, "show")).select_by_value("url")
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".hit .shown").get_attribute("data-field") == "url")
        assert browser.execute_script(OVERFLOWS) == []

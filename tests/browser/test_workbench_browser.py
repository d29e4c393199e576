"""The workbench page in a real headless Chromium (Debian's chromium + chromium-driver, driven
by Selenium): a deep link runs its query, the columns show every mode, a click stores a
judgment (checked through the API), the keyboard judges too, and tune runs from the page.

Without Chromium the test skips locally and fails when ``CI`` is set (scripts/setup installs
the packages when run as root)."""

from __future__ import annotations

import os
import urllib.parse

import pytest

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
    with headless_chromium() as driver:
        yield driver


def test_page_queries_judges_and_tunes(browser, tmp_path, committed_encoder):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    index = examples_local_index(tmp_path / "idx", committed_encoder)
    wait = WebDriverWait(browser, 60)
    with served(index, committed_encoder, tmp_path / "judgments", index="examples", kind="local",
                min_tune_queries=2) as url:
        query = "i can't remember my netflix login"
        browser.get(f"{url}/?" + urllib.parse.urlencode({"q": query, "k": 5}))
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".column .hit")) == 20)
        columns = browser.find_elements(By.CSS_SELECTOR, ".column")
        assert [c.get_attribute("data-mode") for c in columns] == ["bm25", "knn", "hybrid", "rerank"]
        assert browser.find_element(By.ID, "q").get_attribute("value") == query
        assert "270 documents" in browser.find_element(By.ID, "health").text
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

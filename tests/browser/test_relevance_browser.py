"""The workbench's relevance panels in a real headless Chromium: after judging queries, the
significance panel shows each mode against the baseline with its p-values, verdict and
win/loss list; the overlap panel compares two configurations on pasted queries."""

from __future__ import annotations

import pytest

from hybrid_qpr.testing.workbench import call, chromium_for_tests, examples_local_index, judge_bank, served

pytestmark = pytest.mark.browser
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def browser():
    with chromium_for_tests() as driver:
        yield driver


def test_significance_and_overlap_panels(browser, tmp_path, committed_encoder):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    index = examples_local_index(tmp_path / "idx", committed_encoder)
    wait = WebDriverWait(browser, 60)
    with served(index, committed_encoder, tmp_path / "judgments", index="examples", kind="local") as url:
        judged = judge_bank(f"{url}/api", 10)
        browser.get(url + "/")
        wait.until(ec.text_to_be_present_in_element((By.ID, "health"), "270 documents"))

        Select(browser.find_element(By.ID, "sig-baseline")).select_by_visible_text("bm25")
        browser.find_element(By.ID, "significance").click()
        wait.until(ec.visibility_of_element_located((By.ID, "significance-result")))
        rows = browser.find_elements(By.CSS_SELECTOR, "#significance-result tbody tr")
        assert [r.get_attribute("data-run") for r in rows] == ["knn", "hybrid"]
        _, expected = call(f"{url}/api/significance?baseline=bm25&metric=MRR@20")
        for row, c in zip(rows, expected["comparisons"]):
            cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
            assert cells[4] == f"{c['randomization_p_holm']:.4f}" and cells[6:9] == [str(c["wins"]), str(c["losses"]), str(c["ties"])]
            assert cells[9] in ("significant", "within noise")
        assert "10 judged queries" in browser.find_element(By.ID, "significance-status").text
        lists = browser.find_elements(By.CSS_SELECTOR, "#significance-queries details")
        assert [d.get_attribute("data-run") for d in lists] == ["knn", "hybrid"]
        lists[0].find_element(By.TAG_NAME, "summary").click()
        items = lists[0].find_elements(By.CSS_SELECTOR, ".winloss li")
        assert len(items) == len(expected["comparisons"][0]["per_query"])
        if items:
            first = expected["comparisons"][0]["per_query"][0]  # the worst loss (or the smallest win) first
            assert first["text"] in items[0].text and first["text"] in judged.values()

        box = browser.find_element(By.ID, "overlap-queries")
        box.send_keys("how do i reset my netflix password\ncheapest way to fly to lisbon")
        b = browser.find_element(By.ID, "overlap-b")
        b.clear()
        b.send_keys("knn")
        browser.find_element(By.ID, "overlap").click()
        wait.until(ec.visibility_of_element_located((By.ID, "overlap-result")))
        assert "A = hybrid, B = knn: 2 queries, mean RBO" in browser.find_element(By.ID, "overlap-status").text
        assert len(browser.find_elements(By.CSS_SELECTOR, "#overlap-result tbody tr")) == 2

        b.clear()
        b.send_keys("fast")
        browser.find_element(By.ID, "overlap").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "overlap-status"), "starts with a mode"))
        assert "error" in browser.find_element(By.ID, "overlap-status").get_attribute("class")
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE" and "/api/overlap" not in e["message"]]
        assert not errors, errors

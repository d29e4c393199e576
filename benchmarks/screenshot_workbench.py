"""Screenshot of the workbench page for the README (docs/workbench.png), made by headless
Chromium, never by hand.

It indexes the examples/ bank with the committed model in a temporary directory, serves the
workbench on a free local port, judges the hits of 8 held-out queries of the bank through
the API (``hybrid_qpr.testing.workbench.judge_bank``), opens a deep link to one query, judges
two hits on the page, runs "tune on my judgments" there and saves the page.

Usage (needs Debian's chromium and chromium-driver, and the test extra's selenium):
    python benchmarks/screenshot_workbench.py --out docs/workbench.png
"""

from __future__ import annotations

import argparse
import io
import tempfile
import urllib.parse
from pathlib import Path

from _common import REPO
from hybrid_qpr.testing.workbench import chromium_problem, examples_local_index, headless_chromium, judge_bank, served

QUERY = "i can't remember my netflix login"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "workbench.png")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("-k", type=int, default=5, help="hits per column")
    args = parser.parse_args()
    problem = chromium_problem()
    if problem:
        raise SystemExit(f"screenshot_workbench: {problem}")

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from hybrid_qpr.encoders import Encoder

    encoder = Encoder.load(None)
    with tempfile.TemporaryDirectory(prefix="hqpr-screenshot-") as tmp:
        index = examples_local_index(Path(tmp) / "examples-idx", encoder)
        with served(index, encoder, Path(tmp) / "judgments", index="examples/questions.jsonl", kind="local") as url, \
                headless_chromium() as browser:
            judge_bank(url + "/api", 8)
            wait = WebDriverWait(browser, 60)
            browser.set_window_size(args.width, 900)
            browser.get(f"{url}/?" + urllib.parse.urlencode({"q": QUERY, "k": args.k}))
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".column .hit")) == 4 * args.k)
            hits = browser.find_elements(By.CSS_SELECTOR, '.column[data-mode="hybrid"] .hit')
            hits[0].find_element(By.CSS_SELECTOR, 'button.judge[data-relevance="2"]').click()
            wait.until(lambda d: "judged-2" in hits[0].get_attribute("class"))
            hits[-1].find_element(By.CSS_SELECTOR, 'button.judge[data-relevance="0"]').click()
            wait.until(lambda d: "judged-0" in hits[-1].get_attribute("class"))
            browser.find_element(By.ID, "tune").click()
            wait.until(ec.visibility_of_element_located((By.ID, "tune-result")))
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".column .hit")) == 4 * args.k)
            browser.find_element(By.ID, "q").click()
            for _ in range(3):  # the window holds the page whole (its frame is outside the viewport)
                page, frame = browser.execute_script("return [document.documentElement.scrollHeight, "
                                                     "window.outerHeight - window.innerHeight]")
                browser.set_window_size(args.width, page + frame + 8)
            browser.execute_script("window.scrollTo(0, 0)")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            png = browser.get_screenshot_as_png()
    from PIL import Image  # a 128-colour palette: a third of the size, no visible change on this page

    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(
        args.out, optimize=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

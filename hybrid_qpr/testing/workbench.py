"""Drive the relevance workbench from a test or a script: the examples/ bank in a local index
(``corpora.example_documents``), the workbench served on a thread, JSON requests to its API,
judging the bank as its qrels say, and headless Chromium to look at the page. Used by the
workbench tests and ``benchmarks/screenshot_workbench.py``."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hybrid_qpr.workbench.guard import TOKEN_HEADER

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000")


def examples_local_index(path: Path, encoder):
    """A local index at ``path`` holding ``example_documents()`` encoded by ``encoder``."""
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.testing.corpora import example_documents

    index = LocalIndex.create(path, encoder)
    index.ingest(example_documents(), encoder, show_progress=False)
    return index


@contextmanager
def served(backend, encoder, judgments_dir: Path, *, index: str, kind: str, api_key: str | None = None,
           reranker=None, index_writes: bool = False, **limits):
    """The workbench over ``backend`` (and ``reranker``, a cross-encoder directory, when given) on
    a free local port (``index_writes``: as ``serve --allow-index-writes``); yields its base URL."""
    from hybrid_qpr.search import HybridSearcher
    from hybrid_qpr.workbench.app import BackgroundServer, create_app
    from hybrid_qpr.workbench.judgments import JudgmentStore
    from hybrid_qpr.workbench.service import Limits, Workbench

    workbench = Workbench(HybridSearcher(backend, encoder, reranker=reranker), JudgmentStore(judgments_dir), index=index, backend=kind,
                          limits=Limits(**limits), index_writes=index_writes)
    workbench.warm_up()
    with BackgroundServer(create_app(workbench, api_key=api_key)) as server:
        yield server.url


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServeProcess:
    """``hybrid-qpr serve ARGS`` as a user runs it: its own process on a free port, ready when
    ``/api/health`` answers; its stderr goes to ``log``. ``stop()`` ends it."""

    def __init__(self, log: Path, *args: str, startup_s: float = 120):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        repo = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with open(log, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "hybrid_qpr.cli.main", "serve", *args,
                                          "--port", str(self.port)], env=env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + startup_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}: {log.read_text()}")
            try:
                if call(f"{self.url}/api/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"serve did not answer within {startup_s:.0f} s: {log.read_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)

    def rss_mb(self) -> float:
        """The server's resident memory (Linux)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS line in /proc/PID/status")


def call(url: str, method: str = "GET", body: Any = None, *, raw: bytes | None = None,
         headers: dict[str, str] | None = None, token: bool = True) -> tuple[int, Any]:
    """``(status, parsed JSON answer)`` of one request; HTTP errors are answers too. A write
    carries the server's token, read from ``/api/session`` as the page does, unless ``token``
    is false (a test playing a hostile page)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token and method not in ("GET", "HEAD") and TOKEN_HEADER not in sent:
        sent[TOKEN_HEADER] = session_token(url, headers)
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text)
        except ValueError:
            return exc.code, text.decode("utf-8", "replace")


def session_token(url: str, headers: dict[str, str] | None = None) -> str:
    """The write token of the workbench serving ``url`` (any URL on it)."""
    parts = urllib.parse.urlsplit(url)
    status, answer = call(f"{parts.scheme}://{parts.netloc}/api/session", headers=headers)
    if status != 200:
        raise RuntimeError(f"the workbench answered /api/session with {status}: {answer}")
    return answer["token"]


def judge_bank(api: str, n: int) -> dict[str, str]:
    """Judge, through ``api`` (the base URL ending in /api), the hits /api/compare shows for the
    first ``n`` held-out queries as the bank's qrels say: a hit of the query's group is
    relevant (1), any other not (0). Returns the judged queries (id -> text)."""
    from hybrid_qpr.testing.corpora import examples_held_out

    queries, qrels = examples_held_out()
    chosen = dict(sorted(queries.items())[:n])
    for qid, text in chosen.items():
        status, answer = call(f"{api}/compare?" + urllib.parse.urlencode({"q": text, "k": 10}))
        _check_answer(status, answer, "/compare")
        for doc in sorted({h["id"] for hits in answer["lists"].values() for h in hits}):
            status, answer = call(f"{api}/judgments", "POST", {"query": text, "id": doc, "relevance": int(doc in qrels[qid])})
            _check_answer(status, answer, "/judgments")
    return chosen


def _check_answer(status: int, answer: Any, endpoint: str) -> None:
    if status != 200:
        raise RuntimeError(f"the workbench answered {endpoint} with {status}: {answer}")


def chromium_problem() -> str | None:
    """Why headless Chromium cannot run here (None when it can)."""
    for tool in ("chromium", "chromedriver"):
        if shutil.which(tool) is None:
            return (f"{tool} is not on PATH: install Debian's chromium and chromium-driver "
                    "(scripts/setup does it when run as root)")
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed: pip install -e '.[test]'"
    return None


@contextmanager
def headless_chromium(*flags: str):
    """A Selenium driver of Debian's Chromium through /usr/bin/chromedriver (never a downloaded
    browser), on a fresh profile directory removed afterwards; ``flags`` are added to
    ``CHROMIUM_FLAGS`` (e.g. ``--host-resolver-rules=MAP evil.example 127.0.0.1``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not fetch a browser or driver
    profile = tempfile.mkdtemp(prefix="hqpr-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (*CHROMIUM_FLAGS, *flags, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@contextmanager
def chromium_for_tests():
    """``headless_chromium()`` for a pytest fixture: skipped (with the reason) when Chromium cannot
    run here, and a failure instead when ``CI`` is set, where the browser tests must run."""
    import pytest

    problem = chromium_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem + " (CI is set, so the browser test must not skip)")
        pytest.skip(problem)
    with headless_chromium() as driver:
        yield driver

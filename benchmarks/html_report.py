"""Build the HTML page for a 12-layer GPT-2 and time how long headless chromium takes to load it.

    python benchmarks/html_report.py [--layers 12] [--tokens 128] [--loads 5] [--keep PAGE]

GPT-2 is built from Hugging Face's default config (12 layers, 768 wide) with random weights
and analyzed through torch.export; the page carries the graph, every cluster's generated
Triton source, source lines and diffs (no numerics: the interpreter would take minutes at
this size). Prints the node count, the time to lay the graph out and write the page, the
file size, and for each load in a fresh tab the time from navigation to the load event (the
scripts draw the graph before it fires), then the time to expand all 12 blocks. Target:
load under 3 s. Needs transformers, selenium, chromium and chromedriver.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_page(layers: int, tokens: int) -> tuple[str, int, float]:
    import torch
    import transformers

    from fusion_core.ir.shapes import InputSpec
    from fusion_core.pipeline import analyze
    from fusion_core.report.html import analysis_html, page_data

    torch.manual_seed(0)
    model = transformers.GPT2Model(transformers.GPT2Config(n_layer=layers, use_cache=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analysis = analyze(model, InputSpec((1, tokens), torch.int64), capture="export")
    start = time.perf_counter()
    text = analysis_html(page_data(analysis, title=f"GPT-2 ({layers} layers, random weights)"))
    return text, analysis.n_nodes, time.perf_counter() - start


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,900"):
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def load_ms(driver, uri: str) -> float:
    driver.get("about:blank")
    driver.get(uri)
    return driver.execute_script(
        "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd;")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--keep", metavar="PAGE", help="also save the page here")
    args = parser.parse_args()

    text, n_nodes, build_s = build_page(args.layers, args.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(args.keep or Path(tmp) / "gpt2.html")
        page.write_text(text, encoding="utf-8")
        size = page.stat().st_size
        driver = browser()
        try:
            times = [load_ms(driver, page.resolve().as_uri()) for _ in range(args.loads)]
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            expand_ms = driver.execute_script(
                "const t0 = performance.now(); panes[0].graph.toggleAll(false);"
                "return performance.now() - t0;")
            drawn = driver.execute_script("return document.querySelectorAll('g.node').length")
            chromium = driver.capabilities.get("browserVersion", "?")
        finally:
            driver.quit()
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    print(f"GPT-2 {args.layers} layers, 1×{args.tokens} tokens: {n_nodes} nodes; "
          f"layout + page {build_s:.2f} s; file {size / 2**20:.2f} MB")
    print("load (navigation → load event, ms): " + ", ".join(f"{t:.0f}" for t in times)
          + f"; median {statistics.median(times):.0f} ms (target < 3000)")
    print(f"expand all blocks: {expand_ms:.0f} ms, {drawn} ops drawn; console errors: "
          f"{len(errors)}")
    print(f"{datetime.date.today()} · {cpu}, {os.cpu_count()} cores · torch "
          f"{metadata.version('torch')}, transformers "
          f"{metadata.version('transformers')}, chromium {chromium}, selenium "
          f"{metadata.version('selenium')}")


if __name__ == "__main__":
    main()

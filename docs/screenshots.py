"""Regenerate the screenshots of the HTML report that docs/cli.md and docs/plugin.md show.

    python docs/screenshots.py

Writes docs/html-cli.png (`fusion-advisor --html` for examples/microgpt.py, the attention
cluster selected), docs/html-index.png (`pytest --fusion-report=DIR` on the example tests)
and docs/html-regressed.png (a test whose cluster split, baseline beside current). Needs
selenium, chromium and chromedriver, like the browser tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fusion_plugin_helpers import PLUGIN_ARGS, marked_test, model_source  # noqa: E402

PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *PLUGIN_ARGS]


def run(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, check=False)


def driver(width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def shoot(page: Path, png: str, size: tuple[int, int], script: str = "") -> None:
    d = driver(*size)
    try:
        d.get(page.as_uri())
        if script:
            d.execute_script(script)
        d.save_screenshot(str(ROOT / "docs" / png))
    finally:
        d.quit()


CLICK_SOFTMAX = """
const g = [...document.querySelectorAll('g.node')]
  .find(g => g.querySelector('text').textContent === 'softmax');
g.dispatchEvent(new MouseEvent('click', {bubbles: true}));
g.scrollIntoView({block: 'center'});
document.querySelector('#tab-details h3:nth-of-type(3)').scrollIntoView();
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        run(["-m", "fusion_core.cli", "--model", "examples/microgpt.py", "--input-shape",
             "2,128", "--dtype", "int64", "--html", str(out / "microgpt.html")], ROOT)
        shoot(out / "microgpt.html", "html-cli.png", (1280, 760), CLICK_SOFTMAX)

        (out / "examples").mkdir()
        run([*PYTEST, "examples/test_examples_fusion.py", f"--fusion-report={out}/examples"],
            ROOT)
        shoot(out / "examples" / "index.html", "html-index.png", (1200, 300))

        proj = out / "proj"
        proj.mkdir()
        (proj / "pytest.ini").write_text("[pytest]\n")
        (proj / "model.py").write_text(model_source("base"))
        (proj / "test_net.py").write_text(marked_test())
        run([*PYTEST, "--fusion-update-baselines"], proj)
        (proj / "model.py").write_text(model_source("split"))
        (proj / "report").mkdir()
        run([*PYTEST, "--fusion-report=report"], proj)
        page = next((proj / "report" / "tests").glob("*.html"))
        shoot(page, "html-regressed.png", (1280, 560),
              "document.querySelector('.pane g.cluster.split')"
              ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")


if __name__ == "__main__":
    main()

"""The HTML pages in a real headless browser (the system chromium through selenium).

Loads the CLI's page for examples/microgpt.py, the plugin's index for the example tests
and regressed tests' side-by-side pages; every test fails on a JavaScript console error
or on any resource the page loads. Skips when selenium, chromium or chromedriver is absent
(`apt-get install chromium chromium-driver`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fusion_plugin_helpers import PLUGIN_ARGS, marked_test, model_source

ROOT = Path(__file__).resolve().parents[1]
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                       reason="needs the chromium and chromium-driver packages"),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,900"):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def load(driver, path: Path) -> None:
    """Open a page; fail on console errors and on anything fetched besides the file."""
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(path.as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    assert_clean(driver)
    fetched = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert fetched == [], f"the page loaded {fetched}"


def assert_clean(driver) -> None:
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def click(driver, css: str):
    element = driver.find_element("css selector", css)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    driver.execute_script(
        "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", element)
    return element


def run(args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def cli_page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "microgpt.html"
    done = run(["-m", "fusion_core.cli", "--model", "examples/microgpt.py", "--input-shape",
                "2,16", "--dtype", "int64", "--html", str(out)], ROOT)
    assert done.returncode == 0, done.stderr
    assert f"Wrote {out}" in done.stdout
    return out


def visible_nodes(driver) -> int:
    return driver.execute_script("return document.querySelectorAll('.pane g.node').length")


def test_cli_page_shows_a_clusters_source_lines_and_kernel(browser, cli_page):
    load(browser, cli_page)
    assert "Click a cluster" in browser.find_element("id", "tab-details").text
    softmax = browser.execute_script(
        "return [...document.querySelectorAll('g.node')].find(g => g.textContent.startsWith("
        "'softmax')).dataset.node")
    click(browser, f'g.node[data-node="{softmax}"]')
    details = browser.find_element("id", "tab-details")
    assert "mul → masked_fill → softmax → dropout" in details.text
    assert "probs = F.softmax(scores, dim=-1)" in browser.find_element("id", "source-lines").text
    kernel = browser.find_element("id", "kernel-source").get_attribute("textContent")
    assert "@triton.jit" in kernel and "def cluster1(" in kernel
    assert browser.find_elements("css selector", '.cluster.selected[data-cluster="1"]')
    assert_clean(browser)


def test_repeated_block_collapses_and_expands(browser, cli_page):
    load(browser, cli_page)
    expanded = visible_nodes(browser)
    assert "▾ collapse ×2" in browser.find_element("css selector", ".toggle").text
    click(browser, ".toggle")
    collapsed = visible_nodes(browser)
    labels = [e.text for e in browser.find_elements("css selector", ".band-label")]
    assert "self.blocks[0–1] ×2" in labels
    assert 0 < collapsed < expanded
    click(browser, ".toggle")
    assert visible_nodes(browser) == expanded
    assert_clean(browser)


def test_rejections_and_inductor_tabs(browser, cli_page):
    load(browser, cli_page)
    click(browser, '.tab[data-tab="rejections"]')
    assert browser.find_element("id", "tab-rejections").text == (
        "No candidate was rejected.")
    click(browser, '.tab[data-tab="inductor"]')
    assert "--vs-inductor" in browser.find_element("id", "tab-inductor").text
    assert_clean(browser)


def test_plugin_index_links_a_page_per_example_test(browser, example_report):
    load(browser, example_report[0] / "index.html")
    rows = browser.find_elements("css selector", ".index tr")[1:]
    assert len(rows) == 6  # the six fusion_check tests of examples/test_examples_fusion.py
    assert [r.find_elements("css selector", "td")[4].text for r in rows] == ["pass"] * 6
    links = [a.get_attribute("href") for a in browser.find_elements("css selector", ".index a")]
    assert len(links) == 6
    for link in links:
        browser.get_log("browser")
        browser.get(link)
        assert_clean(browser)
        assert visible_nodes(browser) > 5
        click(browser, "g.cluster")
        assert "@triton.jit" in browser.find_element("id", "kernel-source").get_attribute(
            "textContent")
        assert_clean(browser)


@pytest.fixture(scope="module")
def regressed_report(tmp_path_factory) -> Path:
    proj = tmp_path_factory.mktemp("regressed")
    (proj / "pytest.ini").write_text("[pytest]\n")
    (proj / "model.py").write_text(model_source("base"))
    (proj / "test_net.py").write_text(marked_test())
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *PLUGIN_ARGS]
    assert run([*args, "--fusion-update-baselines"], proj).returncode == 0
    (proj / "model.py").write_text(model_source("split"))
    (proj / "report").mkdir()
    done = run([*args, "--fusion-report=report"], proj)
    assert done.returncode == 1 and "split into" in done.stdout
    return proj / "report"


def test_regressed_test_page_shows_baseline_and_current_side_by_side(browser,
                                                                     regressed_report):
    load(browser, regressed_report / "index.html")
    assert browser.find_element("css selector", ".status-regressed").text == "regressed"
    click(browser, ".index a")
    assert_clean(browser)
    panes = browser.find_elements("css selector", ".pane")
    assert [p.find_element("css selector", ".toolbar b").text for p in panes] == [
        "baseline", "current"]
    assert "split into" in browser.find_element("css selector", ".messages").text
    assert panes[0].find_elements("css selector", "g.cluster.split")  # the lost cluster
    assert len(panes[1].find_elements("css selector", "g.cluster.split")) == 2  # its parts
    click(browser, ".pane g.cluster.split")
    assert "split" in browser.find_element("id", "tab-details").text
    assert_clean(browser)


def pane_nodes(driver, pane: int, css: str) -> list[str]:
    """The labels of the nodes matching `css` in the pane-th pane."""
    return driver.execute_script(
        "return [...document.querySelectorAll('.pane')[arguments[0]].querySelectorAll("
        "arguments[1])].map(g => g.querySelector('text').textContent)", pane, css)


def test_a_lost_recompute_copy_is_marked_on_both_panes(browser, verdict_report):
    (page,) = verdict_report.glob("test_blocks__test_transformer-*.html")
    load(browser, page)
    # baseline: the copy, inside its cluster (kept: the comparison says it no longer
    # recomputes `add`); current: the value it recomputed, now read from memory; the copy is
    # not drawn there at all
    assert pane_nodes(browser, 0, "g.node.mark-lost") == ["add"]
    assert pane_nodes(browser, 1, "g.node.mark-outside") == ["add"]
    assert not pane_nodes(browser, 1, "g.node.mark-lost")
    # the ops new to a cluster, on both panes (dashed on the baseline's where only a copy)
    assert sorted(pane_nodes(browser, 0, "g.node.mark-new")) == sorted(
        pane_nodes(browser, 1, "g.node.mark-new"))
    assert pane_nodes(browser, 0, "g.node.mark-new.absent")
    assert "no longer recomputes `add`" in browser.find_element("tag name", "body").text
    assert_clean(browser)


def test_a_custom_op_and_the_op_it_replaced(browser, verdict_report):
    (page,) = verdict_report.glob("test_blocks__test_conv-*.html")
    load(browser, page)
    for pane in (0, 1):
        labels = pane_nodes(browser, pane, "g.node")
        assert "demo::gate" in labels and "default" not in labels
    assert pane_nodes(browser, 0, "g.node.mark-lost") == ["sigmoid"]
    assert pane_nodes(browser, 1, "g.node.absent.mark-gone") == ["sigmoid"]
    click(browser, '.tab[data-tab="inductor"]')
    assert browser.find_element("id", "tab-inductor").text == (
        "Inductor was not compared (the pytest plugin does not run Inductor).")
    assert_clean(browser)


@pytest.fixture(scope="module")
def rejection_page(tmp_path_factory) -> Path:
    """A model with a rejected candidate, and an Inductor section (as --vs-inductor writes it,
    made up here: compiling would take a minute) holding a kernel we did not propose."""
    import torch

    from fusion_core.inductor.match import Agreement, KernelMatch
    from fusion_core.report.html import PageResults, analysis_html, page_data

    proj = tmp_path_factory.mktemp("rejection")
    (proj / "inplace_model.py").write_text(model_source("inplace"))
    sys.path.insert(0, str(proj))
    try:
        import inplace_model
    finally:
        sys.path.remove(str(proj))
    torch.manual_seed(0)
    import fusion_core

    analysis = fusion_core.analyze(inplace_model.Net(), (4, 8))
    assert [r.check for r in analysis.rejections] == ["aliasing"]
    missed = KernelMatch("cpp_fused_add_mul_relu_0", "missed", (), ("mul", "relu", "add"),
                         (10, 11, 12))
    inductor = Agreement(analysis.model_name, "define_kernel", (missed,), (), layout_kernels=0)
    page = proj / "page.html"
    page.write_text(analysis_html(page_data(analysis, PageResults(agreement=inductor))))
    return page


def test_rejected_candidate_is_marked_and_explained(browser, rejection_page):
    load(browser, rejection_page)
    badge = click(browser, ".badge")
    assert badge.text == "✗ aliasing"
    details = browser.find_element("id", "tab-details").text
    assert "aliasing" in details and "mutates its input in place" in details
    assert browser.find_elements("css selector", "g.node.rejected.selected")
    click(browser, '.tab[data-tab="rejections"]')
    assert "mutates its input in place" in browser.find_element("id", "tab-rejections").text
    click(browser, '.tab[data-tab="inductor"]')
    inductor = browser.find_element("id", "tab-inductor").text
    assert "cpp_fused_add_mul_relu_0" in inductor
    assert "we rejected a candidate on these lines: aliasing" in inductor
    assert_clean(browser)


def test_untimed_cuda_run_says_its_timings_were_not_run(browser, tmp_path):
    """A CUDA validation with timing off (`--no-timing`, made up here: no GPU needed) keeps its
    numerics and says why the Timings are empty, in the CLI's words."""
    import torch

    import fusion_core
    from fusion_core.report.html import CLI_HINTS, PageResults, analysis_html, page_data
    from fusion_core.validate import GateResult, ModelCheck, ValidationReport, ValidationResult

    class Small(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 2) + 1

    analysis = fusion_core.analyze(Small(), (4, 8))
    verified = ValidationResult(0, "cuda", (4, 8), (
        GateResult("cluster numerics", True, max_abs_err=0.0),
        GateResult("model numerics", True, max_abs_err=0.0)))
    report = ValidationReport((verified,), ModelCheck(True, 0.0, (0,)), "cuda", "Stub GPU")
    page = tmp_path / "page.html"
    page.write_text(analysis_html(page_data(analysis, PageResults(report=report),
                                            hints=CLI_HINTS)))
    load(browser, page)
    relu = browser.execute_script(
        "return [...document.querySelectorAll('g.node')].find(g => g.textContent.startsWith("
        "'relu')).dataset.node")
    click(browser, f'g.node[data-node="{relu}"]')
    details = browser.find_element("id", "tab-details").text
    assert "verified (cuda)" in details
    assert "not measured (timings not run: --no-timing)" in details
    assert "needs a CUDA GPU" not in details
    assert_clean(browser)

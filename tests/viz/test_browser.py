"""The page of `python -m needle viz` in a real browser (headless Chromium driven by
selenium): step through the stages with the arrow keys, click a node, a kernel and a
bar of the timeline, and check what is shown.  Skipped, saying why, where Chromium,
its driver or selenium is missing (.ci/run installs them)."""
import shutil
import time

import pytest

import needle as ndl
from needle import viz

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:  # pragma: no cover
    pytest.skip("selenium is not installed (pip install selenium)", allow_module_level=True)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
if CHROMIUM is None or DRIVER is None:  # pragma: no cover
    pytest.skip("headless Chromium and its driver are not installed (apt-get install chromium chromium-driver)",
                allow_module_level=True)

STAGES = ["autograd", "graph", "folded", "fused", "kernels"]


@pytest.fixture(scope="module")
def browser():
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(flag)
    try:
        driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    except WebDriverException as e:  # pragma: no cover
        pytest.skip(f"headless Chromium does not start here: {e.msg}")
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def serve():
    servers = []

    def start(recording):
        server = viz.Server(recording, port=0).start()
        servers.append(server)
        return server.url
    yield start
    for server in servers:
        server.close()


def _wait(driver, script, timeout=60.0):
    end = time.time() + timeout
    while time.time() < end:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {script}")


def _stage_ready(driver):
    _wait(driver, "return document.getElementById('graph').dataset.ready === '1'")
    return driver.execute_script("return document.getElementById('graph').dataset.stage")


def _open(driver, url):
    driver.get(url)
    _wait(driver, "return document.body.dataset.ready === '1'")
    return _stage_ready(driver)


def _key(driver, key):
    ActionChains(driver).send_keys(key).perform()
    return _stage_ready(driver)


def _click(driver, element):
    driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", element)
    ActionChains(driver).move_to_element(element).click().perform()


def _details(driver):
    return driver.find_element(By.ID, "details").text


def _llvm_of_selected_kernel(driver):
    _click(driver, driver.find_element(By.ID, "codetab"))
    return _wait(driver, "const t = document.getElementById('code').textContent; return t.includes('define') && t")


def test_an_mlp_step_with_batchnorm_stage_by_stage(browser, serve, mlp_step):
    step = mlp_step(lambda model, x: model(x))
    x, y = step.x, step.y
    with ndl.lazy(True), viz.record() as rec:
        for _ in range(3):
            step(x, y).numpy()
    recording = rec.recording()
    item = recording.data["items"][-1]
    kernels = recording.data["shots"][item["shots"][0]]["kernels"]
    url = serve(recording)

    stage = _open(browser, url)
    assert stage == "fused"  # (the page opens on the fused groups of the entry run most)
    assert browser.find_element(By.CSS_SELECTOR, "#list .item.selected .badge").text == "2 runs"
    # the arrow keys step through the stages, around
    seen = [stage]
    for _ in range(len(STAGES)):
        seen.append(_key(browser, Keys.ARROW_RIGHT))
        assert browser.find_elements(By.CSS_SELECTOR, "#graph svg g.node"), seen[-1]
        assert browser.find_element(By.CSS_SELECTOR, "#stages button.active").text.replace(" ", "") \
            .startswith({"folded": "after", "fused": "fused"}.get(seen[-1], seen[-1]))
    assert seen == ["fused", "kernels", "autograd", "graph", "folded", "fused"]
    assert _key(browser, Keys.ARROW_LEFT) == "folded" and _key(browser, Keys.ARROW_LEFT) == "graph"

    # a node of the graph: its op, shape, dtype, fused ops and the line of this file that built it
    matmul = next(g for g in browser.find_elements(By.CSS_SELECTOR, "#graph g.node") if " matmul" in g.text)
    _click(browser, matmul)
    details = _details(browser)
    assert "op matmul" in details and "dtype f32" in details
    assert "shape (16, 32)" in details or "shape (16, 5)" in details or "shape (" in details
    assert "fused ops" in details and "MatMul" in details
    line = next(row for row in details.splitlines() if row.startswith("source line"))
    assert "test_browser.py:" in line and "model(x)" in line

    # a kernel of the list: its details, loop IR and LLVM IR
    index = next(i for i, k in enumerate(kernels) if k["name"].startswith("M_"))
    _click(browser, browser.find_element(By.CSS_SELECTOR, f"#list .kernel[data-kernel='{index}']"))
    assert _details(browser).startswith(f"kernel {index}: {kernels[index]['name']}")
    assert "time" in _details(browser)
    assert browser.find_element(By.ID, "code").text.startswith(f"kernel {kernels[index]['name']}")
    assert "define" in _llvm_of_selected_kernel(browser)
    assert browser.find_elements(By.CSS_SELECTOR, "#graph g.node.lit"), "the kernel's nodes are lit in the picture"

    # the timeline: one bar per launch; a bar selects its kernel
    bars = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.kernel")
    assert len(bars) == len(kernels)
    widest = max(bars, key=lambda bar: float(bar.get_attribute("width")))
    title = widest.find_element(By.TAG_NAME, "title").get_attribute("textContent")  # "kernel 6: M_...: 2.1 ms"
    call = int(title.split(":")[0].split()[1])
    # (the bar's own click event: a pointer click at its centre can land on a neighbour
    # when bars are a pixel or two wide, as they are on a loaded machine's timeline)
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", widest)
    assert _details(browser).startswith(f"kernel {call}: {kernels[call]['name']}")
    assert browser.find_element(By.CSS_SELECTOR, "#list .kernel.selected").get_attribute("data-kernel") == str(call)

    # the autograd stage: a Tensor's op, shape and line; the fused stage: each boundary's reason
    while _stage_ready(browser) != "autograd":
        _key(browser, Keys.ARROW_LEFT)
    tensor = next(g for g in browser.find_elements(By.CSS_SELECTOR, "#graph g.node") if "MatMul" in g.text)
    _click(browser, tensor)
    assert "op MatMul" in _details(browser) and "test_browser.py:" in _details(browser)
    _key(browser, Keys.ARROW_RIGHT), _key(browser, Keys.ARROW_RIGHT)
    assert _key(browser, Keys.ARROW_RIGHT) == "fused"
    labels = browser.find_element(By.ID, "graph").text
    assert "stored" in labels and "kernel 0:" in labels


def test_a_jitted_step_is_one_entry_with_its_replays(browser, serve, mlp_step):
    step = mlp_step(lambda model, x: model(x))
    x, y = step.x, step.y
    jitted = ndl.jit(step)
    with ndl.lazy(True), viz.record() as rec:
        for _ in range(5):
            jitted(x, y)
    recording = rec.recording()
    url = serve(recording)
    _open(browser, url)
    entry = next(e for e in browser.find_elements(By.CSS_SELECTOR, "#list .item") if "needle.jit(" in e.text)
    assert "replays" in entry.find_element(By.CSS_SELECTOR, ".badge").text
    _click(browser, entry)
    assert _stage_ready(browser) == "fused"
    first = browser.find_element(By.CSS_SELECTOR, "#list .kernel")
    _click(browser, first)
    assert _details(browser).startswith("kernel 0: ")
    assert "define" in _llvm_of_selected_kernel(browser)
    assert "replay" in browser.find_element(By.ID, "timelinetitle").text
    assert browser.find_elements(By.CSS_SELECTOR, "#timeline rect.kernel")

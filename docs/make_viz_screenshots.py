"""Screenshots of `python -m needle viz` for the README and docs/seeing-a-step.md.

    python docs/make_viz_screenshots.py [--out docs/img]

Records an MLP step with BatchNorm (3 SGD steps, lazily) and ResNet9's step
(examples/models.py, batch 8), serves each page, and photographs it in headless
Chromium (Debian's `chromium` and `chromium-driver`, driven by selenium):

- viz-fused.png    the MLP step's fused groups, a matmul node clicked, its kernel's LLVM IR
- viz-graph.png    the graph stage, a node and its source line, the kernel's loop IR
- viz-resnet9.png  ResNet9's step at the fused stage: one box per kernel (1,500 nodes)
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import needle as ndl  # noqa: E402
import needle.nn as nn  # noqa: E402
from needle import viz  # noqa: E402


def recording(model, x, y, steps: int = 3):
    """`steps` SGD steps of `model` on (x, y), lazily, recorded."""
    opt = ndl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with ndl.lazy(True), viz.record() as rec:
        for _ in range(steps):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x), y)
            loss.backward()
            opt.step()
            loss.numpy()
    return rec.recording()


def data(rng, shape, classes):
    x = ndl.Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=False)
    return x, ndl.Tensor(rng.integers(0, classes, shape[0]).astype(np.float32), requires_grad=False)


def mlp_step_recording():
    model = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 10))
    return recording(model, *data(np.random.default_rng(0), (32, 64), 10))


def resnet9_recording():
    from models import ResNet9
    return recording(ResNet9(), *data(np.random.default_rng(0), (8, 3, 32, 32), 10))


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    options = Options()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,860",
                 "--force-device-scale-factor=1"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))


def wait(driver, script, timeout=60.0):
    end = time.time() + timeout
    while time.time() < end:
        if driver.execute_script(script):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the page did not get ready: {script}")


def show(driver, url, stage):
    driver.get(f"{url}?{stage}#stage={stage}")  # (the query: a new page, not a hash change)
    wait(driver, "return document.body.dataset.ready === '1' && document.getElementById('graph').dataset.ready === '1'")


def click_node(driver, text):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    node = next(g for g in driver.find_elements(By.CSS_SELECTOR, "#graph g.node") if text in g.text)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", node)
    ActionChains(driver).move_to_element(node).click().perform()


def click_kernel_of_details(driver):
    from selenium.webdriver.common.by import By
    links = driver.find_elements(By.CSS_SELECTOR, "#details a[data-kernel]")
    if links:
        links[0].click()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "img"))
    args = parser.parse_args()
    driver = browser()
    try:
        server = viz.Server(mlp_step_recording(), port=0).start()
        show(driver, server.url, "fused")
        click_node(driver, " matmul")
        details = driver.page_source
        click_kernel_of_details(driver)
        driver.find_element("id", "codetab").click()
        wait(driver, "return document.getElementById('code').textContent.includes('define')")
        click_node(driver, " matmul")
        driver.find_element("css selector", "button.span[data-span='run']").click()
        driver.save_screenshot(os.path.join(args.out, "viz-fused.png"))
        show(driver, server.url, "graph")
        click_node(driver, " max")
        click_kernel_of_details(driver)
        click_node(driver, " max")
        driver.save_screenshot(os.path.join(args.out, "viz-graph.png"))
        server.close()
        assert "source line" in details
        server = viz.Server(resnet9_recording(), port=0).start()
        show(driver, server.url, "fused")
        driver.find_element("css selector", "#list .kernel[data-kernel='5']").click()
        driver.save_screenshot(os.path.join(args.out, "viz-resnet9.png"))
        server.close()
    finally:
        driver.quit()
    for name in ("viz-fused.png", "viz-graph.png", "viz-resnet9.png"):
        print("wrote", os.path.join(args.out, name))


if __name__ == "__main__":
    main()

"""What the browser tests share: headless chromium driven by selenium (skipped, saying what is
missing, where selenium, chromium or chromedriver is not installed; Debian: `apt-get install
chromium chromium-driver`), screenshots, and a TensorBoard server on this machine's loopback
interface for the duration of a test."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def chromium() -> tuple[str, str]:
    """The chromium binary and its driver, or skip the test saying what is missing."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install selenium)")
    browser = next(
        (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))),
        None,
    )
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip(
            "chromium or chromedriver is missing (apt-get install chromium chromium-driver)"
        )
    return browser, driver


@contextlib.contextmanager
def headless_chromium(width: int = 1366, height: int = 768, offline: bool = True) -> Iterator:
    """A selenium driver of headless chromium with a `width` x `height` window, its console
    logged (`driver.get_log("browser")`); `offline`: no network at all (a page that loads
    nothing must not need it), else this machine's loopback only as the pages ask."""
    binary, driver_path = chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        if offline:
            driver.set_network_conditions(offline=True, latency=0, throughput=0)
        yield driver
    finally:
        driver.quit()


def screenshot(driver, tmp_path: Path, name: str, full: bool = True) -> Path:
    """A screenshot of the top of the page, the whole page when `full`, in tmp_path (and in
    $ATTNSEQ_SCREENSHOTS when set)."""
    path = tmp_path / f"{name}.png"
    driver.execute_script("window.scrollTo(0, 0)")
    if full:
        width = driver.execute_script("return document.documentElement.clientWidth")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
        )
    assert driver.save_screenshot(str(path))
    if folder := os.environ.get("ATTNSEQ_SCREENSHOTS"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(folder) / path.name)
    assert path.stat().st_size > 1000
    return path


def free_port() -> int:
    """A TCP port nothing listens on at this moment, on the loopback interface."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


TENSORBOARD_START_SECONDS = 120  # to answer its first request (a loaded machine is slow)


@contextlib.contextmanager
def tensorboard_server(logdir: Path, runs: int = 1) -> Iterator[str]:
    """`tensorboard --logdir LOGDIR` on a free port of the loopback interface alone (its
    default host, named), from this Python's TensorBoard; yields its URL once it lists `runs`
    runs, and stops it at the end."""
    import json

    port = free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)]
    command += ["--port", str(port), "--host", "127.0.0.1"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + TENSORBOARD_START_SECONDS
        while True:
            if server.poll() is not None:
                pytest.fail(f"tensorboard ended: {server.stderr.read().decode()[-2000:]}")
            try:
                listed = json.loads(urllib.request.urlopen(f"{url}/data/runs", timeout=5).read())
            except OSError:
                listed = []
            if len(listed) >= runs:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"tensorboard listed {listed} after {TENSORBOARD_START_SECONDS} s")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

"""A data campaign launched from the Prefect UI in a real browser (headless Debian chromium).

``pdeladder flows serve`` (the ``served`` fixture) starts its own local Prefect server and serves
the deployments; the browser finds the data-campaign deployment, fills the custom-run form,
submits it, and waits for the run to complete; the store is then checked. Screenshots of the form and of the finished run
are saved under ``tmp_path`` (and under ``$PDELADDER_SCREENSHOTS`` when set, for docs/img).
"""

import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from pdeladder.dataset.format import OK
from pdeladder.dataset.store import open_store

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian chromium and chromium-driver: run deploy/install-browser.sh",
)


@pytest.fixture
def browser(tmp_path: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1400,1000",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.implicitly_wait(60)
    try:
        yield driver
    finally:
        driver.quit()


def form_property(driver, label: str):
    """The custom-run form's block for the parameter labelled ``label``."""
    from selenium.webdriver.common.by import By

    prop = "contains(concat(' ', normalize-space(@class), ' '), ' schema-form-property ')"
    own_label = (
        "./div[contains(@class, 'p-label__header')]//span[contains(@class, "
        f"'schema-form-property__label') and starts-with(normalize-space(), '{label}')]"
    )
    return driver.find_element(By.XPATH, f"//div[{prop}][{own_label}]")


def retrying(action, attempts: int = 10):
    """Run ``action``, again while the form re-renders under it (a stale element)."""
    from selenium.common.exceptions import StaleElementReferenceException

    for attempt in range(attempts):
        try:
            return action()
        except StaleElementReferenceException:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)


def click_in(driver, label: str, button: str) -> None:
    from selenium.webdriver.common.by import By

    xpath = f".//button[normalize-space()='{button}']"
    retrying(lambda: form_property(driver, label).find_element(By.XPATH, xpath).click())


def type_into(driver, label: str, text: str, clear: bool = False) -> None:
    from selenium.webdriver.common.by import By

    def act() -> None:
        field = form_property(driver, label).find_element(By.XPATH, ".//textarea | .//input")
        if clear:
            field.clear()
        field.send_keys(text)

    retrying(act)


def flow_run_state(ui_url: str, run_id: str, timeout_s: float = 120) -> str:
    """The run's final state type, read from the server's API."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = httpx.get(f"{ui_url}/api/flow_runs/{run_id}", timeout=10).json()["state"]["type"]
        if state in {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"} or time.monotonic() > deadline:
            return state
        time.sleep(1)


def flow_run_logs(ui_url: str, run_id: str) -> str:
    """The run's log messages, oldest first (shown when the run did not complete)."""
    body = {"logs": {"flow_run_id": {"any_": [run_id]}}, "sort": "TIMESTAMP_ASC", "limit": 200}
    logs = httpx.post(f"{ui_url}/api/logs/filter", json=body, timeout=10).json()
    return "\n".join(entry["message"] for entry in logs)


def screenshot(driver, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    driver.save_screenshot(str(path))
    if folder := os.environ.get("PDELADDER_SCREENSHOTS"):
        shutil.copy(path, Path(folder) / name)


# Serial: `make test` runs it after the parallel suite, with the machine to itself (inside the
# parallel run on 2 cores, beside two other Ray runtimes, the campaign's solver actors died).
@pytest.mark.serial
def test_a_campaign_launched_from_the_ui_fills_the_store(
    served: str, browser, ray_head, tiny_spec: Path, tmp_path: Path
):
    """The campaign joins a running Ray cluster (the form's Ray address), as on a deployment;
    a fourth Ray runtime started beside the suite's would not reliably come up on 2 cores."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    store_url = str(tmp_path / "ui-store.zarr")
    browser.get(f"{served}/deployments")
    browser.find_element(By.PARTIAL_LINK_TEXT, "data-campaign").click()
    browser.find_element(By.XPATH, "//button[normalize-space()='Run']").click()
    browser.find_element(By.XPATH, "//button[normalize-space()='Custom run']").click()

    type_into(browser, "Curriculum", str(tiny_spec), clear=True)
    click_in(browser, "Store Url", "str")  # an optional field: choose a string, not None
    type_into(browser, "Store Url", store_url)
    click_in(browser, "Ray Address", "str")
    type_into(browser, "Ray Address", ray_head.gcs)
    click_in(browser, "Stages", "Add item")
    type_into(browser, "Stages", "first")
    screenshot(browser, tmp_path, "ui-custom-run.png")
    submit = browser.find_element(By.XPATH, "//button[normalize-space()='Submit']")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", submit)
    submit.click()
    # The UI returns to the deployment, which lists the new run: open it and wait for its end.
    run = (By.XPATH, "//a[contains(@href, '/runs/flow-run/')]")
    WebDriverWait(browser, 120).until(ec.presence_of_element_located(run))
    browser.get(browser.find_element(*run).get_attribute("href"))
    ended = ("Completed", "Failed", "Crashed", "Cancelled")
    WebDriverWait(browser, 420, poll_frequency=2).until(
        lambda d: any(s in d.find_element(By.TAG_NAME, "body").text for s in ended)
    )
    time.sleep(3)  # let the run's graph and logs render for the picture
    screenshot(browser, tmp_path, "ui-flow-run.png")
    run_id = browser.current_url.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
    state = flow_run_state(served, run_id)
    assert state == "COMPLETED", f"run {state}:\n{flow_run_logs(served, run_id)[-4000:]}"
    assert "Completed" in browser.find_element(By.TAG_NAME, "body").text

    [path] = open_store(store_url).groups()
    assert path.startswith("first/heat/1d_n9")
    group = open_store(store_url).group(path)
    reasons = [group.info(i)["reason"] for i in range(group.n_samples)]
    assert (group.status() == OK).sum() == 3, (
        f"failures: {reasons}\nRay head logs:\n{ray_head.log_excerpt()}"
    )

"""The console's issue-31 additions against the real broker, in headless Chromium: the audited dead-letter resend
(log line, last resent and by whom, counts, a confirm dialog before resending a letter again, kept across a restart),
producer connections, the broker's configuration with secrets masked, whole-number chart ticks and 24-hour times."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from client import Message, Producer
from tests.support.admin import mqadmin
from tests.support.broker_process import free_port
from tests.support.console import GROUP, TOPIC, http, open_page, screenshot, seed_broker, start_browser, wait_rendered
from tests.support.wire import WireClient, pull_records

DEAD = "DEADBEEF00000000000000000000CAFE"


@pytest.fixture
def chrome(tmp_path_factory):
    browser = start_browser(tmp_path_factory.mktemp("chromium"))
    yield browser
    browser.quit()


def _audit_lines(broker) -> list[str]:
    return [line for line in broker.log_text().splitlines() if "DLQ resend by" in line]


async def _flash(chrome, text: str, timeout: float = 10.0) -> str:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while text not in chrome.find_element(By.ID, "flash").text:
        assert time.monotonic() < deadline, chrome.find_element(By.ID, "flash").text
        await asyncio.sleep(0.05)
    return chrome.find_element(By.ID, "flash").text


async def test_dead_letter_resends_are_audited_confirmed_and_kept(broker_factory, chrome, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import alert_is_present
    from selenium.webdriver.support.ui import WebDriverWait

    port = free_port()
    broker = broker_factory(extra={"dashboardPort": port}, start=False).start(log_level="INFO")
    base = f"http://127.0.0.1:{port}"
    await seed_broker(broker.addr)

    # before: one letter, never resent
    await asyncio.to_thread(open_page, chrome, base, f"/dlq/{GROUP}")
    assert chrome.find_element(By.ID, "dlq-awaiting").text == "1"
    assert "never" in chrome.find_element(By.CSS_SELECTOR, "#dead-letters tbody").text

    # the first resend: no question asked, one audit line naming who, the group, the message and the target
    chrome.find_element(By.CSS_SELECTOR, "#dead-letters tbody button.resend").click()
    await _flash(chrome, "Resent 1 of 1")
    await asyncio.to_thread(wait_rendered, chrome, f"/dlq/{GROUP}")
    (line,) = _audit_lines(broker)
    assert f"group {GROUP}" in line and f"message {DEAD}" in line and f"to %RETRY%{GROUP}" in line
    assert re.search(r"DLQ resend by console@127\.0\.0\.1", line), line
    row = chrome.find_element(By.CSS_SELECTOR, "#dead-letters tbody tr").text
    assert "console@127.0.0.1" in row and f"%RETRY%{GROUP}" in row and "never" not in row
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", row) and " AM" not in row and " PM" not in row
    assert (chrome.find_element(By.ID, "dlq-resent").text, chrome.find_element(By.ID, "dlq-awaiting").text) == \
           ("1", "0")
    screenshot(chrome, tmp_path, "console-dlq-resent.png")

    # again: the page asks first; dismissing sends nothing
    chrome.find_element(By.CSS_SELECTOR, "#dead-letters tbody button.resend").click()
    alert = WebDriverWait(chrome, 10).until(alert_is_present())
    assert "resent before" in alert.text and "console@127.0.0.1" in alert.text
    alert.dismiss()
    await _flash(chrome, "Nothing resent")
    assert len(_audit_lines(broker)) == 1
    # confirming resends it a second time
    chrome.find_element(By.CSS_SELECTOR, "#dead-letters tbody button.resend").click()
    WebDriverWait(chrome, 10).until(alert_is_present()).accept()
    await _flash(chrome, "Resent 1 of 1")
    assert len(_audit_lines(broker)) == 2 and "(resent 2 times)" in _audit_lines(broker)[1]
    async with await WireClient.connect(broker.addr) as client:
        resent = await pull_records(client, "%RETRY%" + GROUP, 0)
    assert [r.uniq_key for r in resent] == [DEAD, DEAD]

    # the groups list counts it as resent
    await asyncio.to_thread(open_page, chrome, base, "/groups")
    row = next(r for r in chrome.find_elements(By.CSS_SELECTOR, "#groups tbody tr") if r.text.startswith(GROUP))
    assert row.text.endswith("0 (1 resent)"), row.text

    # mqadmin: refused without --force (the account/address is named), then resent with it
    ns = broker.namesrv_addr
    refused = await asyncio.to_thread(mqadmin, ns, "resendDlq", "-g", GROUP, "-i", DEAD)
    assert refused.returncode == 1 and "already resent" in refused.stderr and "--force" in refused.stderr
    forced = await asyncio.to_thread(mqadmin, ns, "resendDlq", "-g", GROUP, "-i", DEAD, "--force")
    assert forced.returncode == 0, forced.stderr
    lines = _audit_lines(broker)
    assert len(lines) == 3 and re.search(r"DLQ resend by 127\.0\.0\.1:\d+: group", lines[2]), lines[2]

    # the record survives a restart
    broker.stop()
    broker.start(log_level="INFO")
    status, letters, _ = await asyncio.to_thread(http, base, f"/api/dlq/{GROUP}")
    assert status == 200 and letters["resent"] == 1 and letters["awaiting"] == 0
    last = letters["messages"][0]["lastResent"]
    assert last["count"] == 3 and last["by"].startswith("127.0.0.1:") and last["target"] == f"%RETRY%{GROUP}"
    status, answer, _ = await asyncio.to_thread(http, base, f"/api/dlq/{GROUP}/resend", {"all": True})
    assert status == 409 and answer["needsConfirm"] and answer["alreadyResent"][0]["count"] == 3


async def test_producers_configuration_ticks_and_24_hour_fields(broker_factory, chrome, tmp_path):
    from selenium.webdriver.common.by import By

    port = free_port()
    broker = broker_factory(extra={"dashboardPort": port, "accessKey": "rocketmq2", "secretKey": "s3cr3t-value"})
    base = f"http://127.0.0.1:{port}"
    await seed_broker(broker.addr)

    async with Producer("console-producers-pg", broker.namesrv_addr) as producer:
        await producer.send(Message(TOPIC, b"hello"))
        await asyncio.to_thread(open_page, chrome, base, "/producers")
        text = chrome.find_element(By.ID, "producers").text
        assert "console-producers-pg" in text and producer.client_id in text and "PYTHON" in text.upper()
        screenshot(chrome, tmp_path, "console-producers.png")

    # the broker's configuration, the secret masked (and never sent to the page)
    page = await asyncio.to_thread(open_page, chrome, base, "/config")
    assert "brokerName" in page and "listenPort" in page and "s3cr3t-value" not in chrome.page_source
    status, config, _ = await asyncio.to_thread(http, base, "/api/config")
    values = {e["key"]: e for e in config["entries"]}
    assert values["accessKey"]["value"] == "rocketmq2" and values["brokerName"]["value"] == "broker-a"
    assert all(e["value"] in ("", "******") for e in config["entries"] if e["masked"])
    assert "s3cr3t-value" not in str(config)

    # the lag chart of a group whose lag is 4: whole-number ticks only
    await asyncio.to_thread(open_page, chrome, base, f"/group/{GROUP}")
    deadline = time.monotonic() + 30  # the first sample of the lag history (sampled every 10 s)
    while not chrome.find_elements(By.CSS_SELECTOR, "#lag-chart text.tick"):
        assert time.monotonic() < deadline, "no lag sample"
        await asyncio.sleep(1)
        await asyncio.to_thread(open_page, chrome, base, f"/group/{GROUP}")
    ticks = [t.text for t in chrome.find_elements(By.CSS_SELECTOR, "#lag-chart text.tick")]
    assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks), ticks
    assert ticks[0] == "0" and int(ticks[-1]) >= 4

    # date-time fields are 24-hour text, and they work
    assert not chrome.find_elements(By.CSS_SELECTOR, "input[type=datetime-local]")
    when = chrome.find_element(By.CSS_SELECTOR, "#reset-form input[name=when]").get_attribute("value")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", when), when
    await asyncio.to_thread(open_page, chrome, base, f"/messages?topic={TOPIC}")
    begin = chrome.find_element(By.CSS_SELECTOR, "#search-time input[name=begin]")
    begin.clear()
    begin.send_keys("2000-01-01 13:00:00")
    chrome.find_element(By.CSS_SELECTOR, "#search-time button[type=submit]").click()
    deadline = time.monotonic() + 10
    while "begin=946" not in chrome.current_url:  # 2000-01-01 in any time zone
        assert time.monotonic() < deadline, chrome.current_url
        await asyncio.sleep(0.05)
    assert "6 message(s)" in (await asyncio.to_thread(wait_rendered, chrome, chrome.current_url.split("#", 1)[1])
                              and chrome.find_element(By.ID, "main").text)
    assert chrome.find_element(By.CSS_SELECTOR, "#search-time input[name=begin]").get_attribute("value") == \
           "2000-01-01 13:00:00"

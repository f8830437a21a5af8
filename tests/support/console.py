"""A broker with known topics, a consumer group with lag and a dead letter, for the web console's tests; and a
headless Chromium (Debian's chromium + chromium-driver, driven by selenium)."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.client import HTTPConnection

from protocol.codes import RequestCode as RC, ResponseCode as R

from tests.support.wire import WireClient, props, send_v2_fields

TOPIC = "ConsoleOrders"
GROUP = "console-group"
ORDER_BODY = {"order": 3, "item": "tea", "qty": 2}


@dataclass
class KnownData:
    topic: str
    group: str
    dead_uniq_key: str
    order3_uniq_key: str


async def seed_broker(addr: str) -> KnownData:
    """5 messages on TOPIC (keys order-1..5, one JSON body), GROUP consuming queue 0 up to offset 1 (lag 4) and one
    dead letter of GROUP (a retry past the maximum reconsume times)."""
    async with await WireClient.connect(addr) as client:
        create = await client.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "readQueueNums": "1",
                                                                   "writeQueueNums": "1", "perm": "6"})
        assert create.code == R.SUCCESS, create.remark
        order3 = ""
        for i in range(1, 6):
            body = json.dumps(ORDER_BODY).encode() if i == 3 else f"order number {i}".encode()
            resp = await client.request(RC.SEND_MESSAGE_V2, send_v2_fields(TOPIC, 0, props(TAGS="paid",
                                                                                          KEYS=f"order-{i}")), body)
            assert resp.code == R.SUCCESS, resp.remark
            if i == 3:
                order3 = resp.ext_fields["transactionId"] if "transactionId" in resp.ext_fields else ""
        hb = await client.heartbeat("console-client@1", GROUP, TOPIC)
        assert hb.code == R.SUCCESS, hb.remark
        commit = await client.request(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC,
                                                                  "queueId": "0", "commitOffset": "1"})
        assert commit.code == R.SUCCESS, commit.remark
        dead = send_v2_fields("%RETRY%" + GROUP, 0, props(TAGS="paid", KEYS="poison-1", RETRY_TOPIC=TOPIC,
                                                         UNIQ_KEY="DEADBEEF00000000000000000000CAFE"))
        dead["j"] = "17"  # reconsumeTimes past the group's maximum (16): stored in %DLQ%<group>
        resp = await client.request(RC.SEND_MESSAGE_V2, dead, b"poison message")
        assert resp.code == R.SUCCESS, resp.remark
    return KnownData(TOPIC, GROUP, "DEADBEEF00000000000000000000CAFE", order3)


def http(base: str, path: str, body: dict | None = None, *, method: str | None = None,
         cookie: str | None = None, content_type: str = "application/json") -> tuple[int, dict, str | None]:
    """(status, JSON answer, session cookie set by the answer) of one console request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method or ("GET" if body is None else "POST"))
    if data is not None:
        request.add_header("Content-Type", content_type)
    if cookie:
        request.add_header("Cookie", cookie)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw, headers = response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        status, raw, headers = exc.code, exc.read(), exc.headers
    set_cookie = headers.get("Set-Cookie")
    return status, json.loads(raw or b"null"), set_cookie.split(";", 1)[0] if set_cookie else None


def http_at(base: str, path: str, body: dict | None = None, *, method: str | None = None,
            cookie: str | None = None, source: str | None = None,
            host: str | None = None) -> tuple[int, dict, str | None, dict[str, str]]:
    """One console request sent from the loopback address `source` (127.0.0.2, ...: another client address) and
    with `Host: host` when given; (status, JSON answer, session cookie set, response headers)."""
    parts = urllib.parse.urlsplit(base)
    conn = HTTPConnection(parts.hostname, parts.port, timeout=10,
                          source_address=(source, 0) if source else None)
    try:
        headers = {"Host": host} if host is not None else {}
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        if cookie:
            headers["Cookie"] = cookie
        conn.request(method or ("GET" if body is None else "POST"), path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        answer_headers = {k: v for k, v in response.getheaders()}
        set_cookie = response.getheader("Set-Cookie")
        try:
            answer = json.loads(raw or b"null")
        except ValueError:
            answer = {"text": raw.decode("utf-8", "replace")}
        return response.status, answer, set_cookie.split(";", 1)[0] if set_cookie else None, answer_headers
    finally:
        conn.close()


def chromium_paths() -> tuple[str, str]:
    browser = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    missing = [p for p in (browser, driver) if not os.path.exists(p)]
    if missing:
        raise RuntimeError(f"{' and '.join(missing)} not found: install Debian's chromium and chromium-driver "
                           "(apt-get install chromium chromium-driver; .ci/run does)")
    return browser, driver


def start_browser(scratch: "os.PathLike[str] | str"):
    """Headless Chromium whose profile and temporary files live in ``scratch`` (a test's own directory), so that
    nothing is left in /tmp when it quits."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = chromium_paths()
    profile = os.path.join(scratch, "chromium-profile")
    temp = os.path.join(scratch, "chromium-tmp")
    os.makedirs(temp, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--disable-gpu", "--no-first-run", "--disable-extensions", "--proxy-server=direct://",
                "--proxy-bypass-list=*", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    service = Service(driver, env={**os.environ, "TMPDIR": temp})
    chrome = webdriver.Chrome(service=service, options=options)
    chrome.set_page_load_timeout(30)
    chrome.set_script_timeout(30)
    return chrome


def screenshot(chrome, tmp_path: "os.PathLike[str] | str", name: str) -> None:
    """Kept with the test's files; also copied to $CONSOLE_SCREENSHOTS when set (README's pictures)."""
    path = os.path.join(tmp_path, name)
    chrome.save_screenshot(path)
    target = os.environ.get("CONSOLE_SCREENSHOTS")
    if target:
        shutil.copy(path, os.path.join(target, name))


def open_page(chrome, base: str, hash_path: str, timeout: float = 15.0) -> str:
    """Load `hash_path` (e.g. "/topics") and wait until the app rendered it; the main element's text."""
    from selenium.webdriver.common.by import By

    chrome.get(f"{base}/#{hash_path}")
    return wait_rendered(chrome, hash_path, timeout) and chrome.find_element(By.ID, "main").text


def wait_rendered(chrome, hash_path: str, timeout: float = 15.0) -> bool:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        loaded = chrome.find_element(By.ID, "main").get_attribute("data-loaded")
        if loaded == hash_path:
            return True
        time.sleep(0.05)
    raise AssertionError(f"the console did not render {hash_path} within {timeout} s "
                         f"(shown: {chrome.find_element(By.ID, 'main').get_attribute('data-loaded')!r})")

"""A real headless browser for the UI tests: Debian's ``chromium`` driven by selenium through
Debian's ``chromedriver`` (``apt-get install chromium chromium-driver``; .ci/run installs them).

Nothing is downloaded at run time: the driver's path is given to selenium (which then skips
Selenium Manager, its downloader) and ``SE_OFFLINE=true`` forbids Selenium Manager any network
access should anything call it.
"""

from __future__ import annotations

import os
import shutil
import tempfile

CHROMIUM = ("chromium", "chromium-browser")
CHROMEDRIVER = ("chromedriver",)


def find(names: tuple[str, ...], extra: tuple[str, ...] = ()) -> str | None:
    for n in names:
        found = shutil.which(n)
        if found:
            return found
    return next((p for p in extra if os.path.exists(p)), None)


def missing() -> str | None:
    """Why a browser test cannot run here (None when it can)."""
    if find(CHROMIUM) is None:
        return "no chromium on PATH: apt-get install -y chromium chromium-driver (.ci/run does)"
    if find(CHROMEDRIVER, ("/usr/lib/chromium/chromedriver",)) is None:
        return "no chromedriver on PATH: apt-get install -y chromium-driver (.ci/run does)"
    return None


def chrome(width: int = 1440, height: int = 1000):
    """A headless Chromium (a fresh profile in a temporary folder); the caller quits it."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager, if anything calls it, may not download
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    why = missing()
    if why:
        raise RuntimeError(why)
    opts = webdriver.ChromeOptions()
    opts.binary_location = find(CHROMIUM) or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--no-first-run", "--disable-extensions",
                f"--user-data-dir={tempfile.mkdtemp(prefix='eobatch-chromium-')}"):
        opts.add_argument(arg)
    service = Service(executable_path=find(CHROMEDRIVER, ("/usr/lib/chromium/chromedriver",)))
    return webdriver.Chrome(service=service, options=opts)

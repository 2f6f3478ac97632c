"""The Open OnDemand app end to end through a real portal proxy: the session runs under the local
Slurm, Apache httpd proxies /node/HOST/PORT/ as an OnDemand portal does (Host not preserved, the
portal's own origin), and Chromium clicks the view's Connect button, runs chapter 00 up to its
widget (over the kernel's WebSocket, through the proxy) and moves the widget.

A screenshot and the portal's logs are kept in test-artifacts/browser/ for a human to look at.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.slurm.cluster import REPO
from tests.slurm.ood_app import form_values, render, submit_session, wait_for_connection_file
from tests.support.portal_proxy import PORTAL_HOST, running_portal
from tests.test_browser import ARTIFACTS, CHROMIUM_ARGS, launch_chromium, wait_for_idle_kernel

pytestmark = [pytest.mark.slurm, pytest.mark.browser, pytest.mark.portal, pytest.mark.slow]

CHAPTER = "00_orientation"
# The session card's frame on the dashboard page; the app's view.html goes inside it.
DASHBOARD_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>My Interactive Sessions</title></head>
<body><div class="card"><div class="card-body">{view}</div></div></body></html>
"""
# Test-only: lets the test drive JupyterLab through window.jupyterapp, through Jupyter's own config
# path (the session's config is left as it is in production).
EXPOSE_APP = {"LabApp": {"expose_app_in_browser": True}}
RUN_ABOVE_JS = """(index) => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    notebook.activeCellIndex = index;
    window.jupyterapp.commands.execute('notebook:run-all-above');
}"""


def first_cell_after_the_slider() -> int:
    cells = json.loads((REPO / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb").read_text())["cells"]
    return next(index for index, cell in enumerate(cells) if "IntSlider(" in "".join(cell["source"])) + 1


def publish_view(portal, connection: dict, scratch) -> str:
    """The dashboard's session card, with view.html rendered for this session; its URL."""
    values = form_values("", host=connection["host"], port=str(connection["port"]),
                         password=str(connection["password"]))
    view = (render(values, scratch) / "view.html").read_text()
    page = portal.docroot / "session.html"
    page.write_text(DASHBOARD_PAGE.format(view=view))
    page.chmod(0o644)
    return f"{portal.origin}/session.html"


def move_the_slider(page) -> tuple[str, str]:
    """Press → on the first slider; the widget's output before and after (the kernel redraws it)."""
    from playwright.sync_api import expect

    slider = page.locator(".jp-Notebook .widget-slider").first
    expect(slider).to_be_visible(timeout=150_000)
    output = slider.locator("xpath=ancestor::*[contains(@class,'widget-vbox')][1]") \
        .locator(".jp-OutputArea-output").first
    expect(output).to_have_text(re.compile(r"\w"), timeout=60_000)
    slider.scroll_into_view_if_needed()
    before, readout = output.text_content(), slider.locator(".widget-readout").text_content()
    slider.locator(".noUi-handle").first.click()
    page.keyboard.press("ArrowRight")
    expect(slider.locator(".widget-readout")).not_to_have_text(readout, timeout=10_000)
    expect(output).not_to_have_text(before, timeout=30_000)
    return before, output.text_content()


def test_connect_through_the_portal_runs_chapter_00_and_its_widget(local_slurm, tmp_path):
    from playwright.sync_api import sync_playwright

    config_dir = tmp_path / "jupyter-config"
    config_dir.mkdir()
    for name in ("jupyter_server_config.json", "jupyter_lab_config.json"):
        (config_dir / name).write_text(json.dumps(EXPOSE_APP))
    working_dir = tmp_path / "home" / "course"  # a first launch: nothing there yet
    working_dir.mkdir(parents=True)
    with running_portal() as portal:
        rendered = render(form_values(working_dir, portal_origin=portal.origin), tmp_path / "session")
        job_id = submit_session(local_slurm, rendered, tmp_path, env={"JUPYTER_CONFIG_PATH": str(config_dir)})
        try:
            connection = wait_for_connection_file(local_slurm, job_id, rendered / "template")
            dashboard = publish_view(portal, connection, tmp_path / "view")
            with sync_playwright() as playwright:
                drive_the_session(playwright, dashboard, connection)
        finally:
            local_slurm.cancel(job_id)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            (ARTIFACTS / "ondemand-portal.log").write_text(portal.access_log() + portal.error_log())
        session_log = (rendered / "output.log").read_text(errors="replace")
        access_log = portal.access_log()
    assert "Blocking Cross Origin" not in session_log, session_log[-3000:]
    assert str(connection["password"]) not in access_log, "the password reached a URL"
    base = f"/node/{connection['host']}/{connection['port']}"
    assert f'"POST {base}/login HTTP/1.1" 302' in access_log, access_log
    assert re.search(rf'"GET {base}/api/kernels/\S+/channels\S* HTTP/1.1" 101', access_log), access_log


def drive_the_session(playwright, dashboard: str, connection: dict) -> None:
    args = [*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {PORTAL_HOST} 127.0.0.1"]
    browser = launch_chromium(playwright, args)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    lab = None
    try:
        page.goto(dashboard)
        with context.expect_page() as opened:
            page.get_by_text("Connect to the course's JupyterLab").click()
        lab = opened.value
        lab.wait_for_url(re.compile(r"/lab"), timeout=60_000)
        assert str(connection["password"]) not in lab.url
        base = dashboard.rsplit("/", 1)[0] + f"/node/{connection['host']}/{connection['port']}"
        lab.goto(f"{base}/lab/tree/{CHAPTER}/{CHAPTER}.ipynb")
        lab.wait_for_function("window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell')",
                              timeout=60_000)
        wait_for_idle_kernel(lab)
        lab.evaluate(RUN_ABOVE_JS, first_cell_after_the_slider())
        before, after = move_the_slider(lab)
        print(f"through the portal, the widget's output went from {before!r} to {after!r}")
    finally:
        if lab is not None:
            lab.screenshot(path=str(ARTIFACTS / f"{CHAPTER}-through-ondemand.png"), full_page=True)
        browser.close()

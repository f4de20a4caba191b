"""``faultline report``: the submission document of a pipeline run, as one self-contained HTML file and a PDF of it
printed by headless Chromium."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tasks.core.store import write_atomic

CHROMIUM = os.environ.get("FAULTLINE_CHROMIUM", "/usr/bin/chromium")


def pdf_pages(pdf: bytes) -> int:
    """Pages in a PDF (its page objects: ``/Type /Page``, not ``/Pages``)."""
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf))


def print_pdf(html_path: Path, chromium: str = CHROMIUM) -> bytes:
    """The HTML file printed to A4 by headless Chromium (through Playwright), backgrounds kept."""
    from playwright.sync_api import sync_playwright

    if not Path(chromium).is_file():
        raise FileNotFoundError(f"{chromium}: no Chromium to print the PDF with (make browser-deps installs it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(html_path.resolve().as_uri(), wait_until="load")
            return page.pdf(
                format="A4", print_background=True, margin={k: "12mm" for k in ("top", "bottom", "left", "right")}
            )
        finally:
            browser.close()


def build_report(tracker, run_id: str | None, results_dir: Path, out_dir: Path, pdf: bool = True) -> dict[str, Any]:
    """report.html (and report.pdf) of the pipeline run ``run_id`` (either id; None: the latest) in ``out_dir``,
    each written whole or not at all."""
    from tasks.core.report.gather import gather
    from tasks.core.report.render import render

    ev = gather(tracker, run_id, results_dir)
    name = ev.name
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path = out_dir / "report.html"
    write_atomic(html_path, render(ev, f"Faultline: fault prediction on {name}").encode())
    result: dict[str, Any] = {"run_id": ev.run["run_id"], "html": str(html_path), "pdf": None, "pages": None}
    if pdf:
        data = print_pdf(html_path)
        write_atomic(out_dir / "report.pdf", data)
        result.update(pdf=str(out_dir / "report.pdf"), pages=pdf_pages(data))
    return result

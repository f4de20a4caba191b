"""GX Data Docs that render with no network: the scripts, styles and fonts its pages load from CDNs are copied
from the npm packages setup installed (``datadocs_assets.json``) into the site's ``static/vendor/``, and every
page is rewritten to load them by relative paths (so the site also works inside MLflow's artifact viewer and
from any file server). The S3 logo (fetched with the data context id in its query) becomes GX's own copy."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("faultline.datadocs")

SPEC = Path(__file__).with_name("datadocs_assets.json")
VENDOR = "static/vendor"
# src="http..." or href="http..." on <script> and <link> (anchors to GX's docs are links, not loads)
LOADED = re.compile(r"<(?:script|link)\b[^>]*?\b(?:src|href)=\"(https?://[^\"]+)\"", re.IGNORECASE)


def assets_dir() -> Path | None:
    """Where setup unpacked the packages: ``$FAULTLINE_DATADOCS_ASSETS``, else ``<sys.prefix>/share/...``."""
    env = os.environ.get("FAULTLINE_DATADOCS_ASSETS")
    path = Path(env) if env else Path(sys.prefix) / "share" / "faultline-datadocs"
    return path if path.is_dir() else None


def _relative(target: Path, page: Path) -> str:
    return Path(os.path.relpath(target, page.parent)).as_posix()


def vendor_site(site: Path, assets: Path | None = None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rewrite every page under ``site`` to local copies of its CDN assets. Returns what was done: pages,
    files copied, and ``external`` (scripts and styles still loaded from the network, by URL: empty when the
    site renders offline). Without the installed assets nothing is rewritten and ``external`` says so."""
    spec = spec or json.loads(SPEC.read_text())
    assets = assets or assets_dir()
    urls, images, extra = spec["urls"], spec.get("images", {}), spec.get("with", {})
    pages = sorted(site.rglob("*.html"))
    copied: set[str] = set()
    external: set[str] = set()
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for url in sorted(set(LOADED.findall(text))):
            rel = urls.get(url)
            if rel is None or assets is None or not (assets / rel).is_file():
                external.add(url)
                continue
            for item in [rel, *extra.get(rel, [])]:
                if item not in copied:
                    src, dst = assets / item, site / VENDOR / item
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    (shutil.copytree(src, dst, dirs_exist_ok=True) if src.is_dir() else shutil.copy2(src, dst))
                    copied.add(item)
            text = text.replace(f'"{url}"', f'"{_relative(site / VENDOR / rel, page)}"')
        for prefix, local in images.items():  # the logo, with or without its tracking query
            text = re.sub(re.escape(prefix) + r'[^"]*', _relative(site / local, page).replace("\\", r"\\"), text)
        tmp = page.with_name(page.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(page)
    if external:
        why = "no assets installed (make setup)" if assets is None else "not in datadocs_assets.json or not installed"
        log.warning("Data Docs still load %d asset(s) from the network (%s): %s", len(external), why, sorted(external))
    return {"pages": len(pages), "vendored": sorted(copied), "external": sorted(external), "offline": not external}

"""Data Docs vendoring (fakes: a two-page site and a fake assets tree); the real GX site is rewritten in
tests/core/stages/test_validate_ingest.py and opened with the network blocked in tests/flows/test_ui.py."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from tasks.core.datadocs import vendor_site

SPEC = {
    "urls": {
        "https://cdn.example/jq.js": "jq@1/dist/jq.min.js",
        "https://cdn.example/fa.css": "fa@6/css/all.css",
        "https://cdn.example/gone.js": "gone@1/x.js",
    },
    "with": {"fa@6/css/all.css": ["fa@6/webfonts"]},
    "images": {"https://s3.example/logo.png": "static/images/logo.png"},
}
PAGE = (
    '<link href="https://cdn.example/fa.css" rel="stylesheet"><script src="https://cdn.example/jq.js"></script>'
    '<img src="https://s3.example/logo.png?d=1&dataContextId=abc"><a href="https://docs.example/guide">docs</a>'
)


def _assets(root: Path) -> Path:
    for rel, body in {"jq@1/dist/jq.min.js": "jq", "fa@6/css/all.css": "fa", "fa@6/webfonts/a.woff2": "w"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return root


def test_pages_at_any_depth_load_local_copies(tmp_path):
    site = tmp_path / "site"
    (site / "validations" / "s" / "r").mkdir(parents=True)
    (site / "index.html").write_text(PAGE)
    (site / "validations" / "s" / "r" / "p.html").write_text(PAGE)
    done = vendor_site(site, _assets(tmp_path / "assets"), SPEC)
    assert done["offline"] and done["pages"] == 2 and done["external"] == []
    assert set(done["vendored"]) == {"jq@1/dist/jq.min.js", "fa@6/css/all.css", "fa@6/webfonts"}
    top, deep = (site / "index.html").read_text(), (site / "validations/s/r/p.html").read_text()
    assert 'src="static/vendor/jq@1/dist/jq.min.js"' in top and 'src="static/images/logo.png"' in top
    assert 'src="../../../static/vendor/jq@1/dist/jq.min.js"' in deep
    assert 'href="../../../static/vendor/fa@6/css/all.css"' in deep
    assert (site / "static/vendor/fa@6/webfonts/a.woff2").read_text() == "w"  # the CSS's fonts come along
    assert 'href="https://docs.example/guide"' in top  # a link to read, not a load: left as it is
    assert "dataContextId" not in top + deep and not list(site.rglob("*.tmp"))


def test_an_asset_not_installed_or_not_known_is_reported_not_hidden(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(PAGE + '<script src="https://cdn.example/gone.js"></script>')
    done = vendor_site(site, _assets(tmp_path / "assets"), SPEC)
    assert done["external"] == ["https://cdn.example/gone.js"] and done["offline"] is False
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "index.html").write_text(PAGE)
    done = vendor_site(bare, tmp_path / "nothing", SPEC)  # assets dir without the files
    assert done["offline"] is False and len(done["external"]) == 2
    assert "https://cdn.example/jq.js" in (bare / "index.html").read_text()


def test_setup_unpacks_each_npm_tarball_under_its_name(tmp_path, monkeypatch):
    from deployments.setup import install

    spec = {"packages": {"@scope/pkg@1.0.0": {"tarball": "@scope/pkg/-/pkg-1.0.0.tgz", "integrity": "x"}}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    monkeypatch.setattr(install, "DOCS_ASSETS", tmp_path / "spec.json")
    src = tmp_path / "package" / "dist"
    src.mkdir(parents=True)
    (src / "a.js").write_text("a")
    tgz = tmp_path / "pkg-1.0.0.tgz"
    with tarfile.open(tgz, "w:gz") as t:
        t.add(tmp_path / "package", arcname="package")
    root = install.install_docs_assets(tmp_path / "venv", [tgz])
    assert (root / "@scope/pkg@1.0.0/dist/a.js").read_text() == "a"

"""Great Expectations Data Docs that render with no network.

GE's pages load Bootstrap, jQuery, Font Awesome, Vega and a logo from CDNs: offline, its index
lists nothing (its table of validation results is drawn by bootstrap-table from a CDN) and a
validation page's status column is blank (Font Awesome icons). This module rewrites the site
GE wrote so that nothing is requested from outside the site's folder:

- every page loses its CDN stylesheets and scripts, its inline scripts (they need jQuery) and
  CDN images; it gets a small stylesheet of its own, inline;
- the status icons become text marks (✔ passed / ✘ failed) that need no font;
- the index is rewritten as a plain table of every validation: its status, checks passed, the
  suite, and links to its validation and suite pages;
- every page says why its run time reads 1970-01-01 (RUN_TIME_NOTE).

The result is as byte-reproducible as GE's own output: the same input, the same bytes.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path

RUN_TIME_NOTE = ("Run time 1970-01-01 00:00 UTC is a constant, not the time of the validation: every "
                 "validation runs under one fixed run id, so that these pages come out byte for byte the same "
                 "from run to run and DVC can cache them. When a validation ran is in the MLflow run of its "
                 "stage and in data/timings.jsonl.")
PASS_MARK = '<span class="maopd-mark maopd-pass" title="passed">&#10004; passed</span>'
FAIL_MARK = '<span class="maopd-mark maopd-fail" title="failed">&#10008; failed</span>'

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;font-size:15px;line-height:1.45;
color:#212529;margin:0;background:#fff}
a{color:#0b5cad}
nav{display:flex;align-items:center;gap:1em;padding:.4em 1.5em;border-bottom:1px solid #dee2e6;
height:auto!important}
nav img{height:36px!important}
.ge-breadcrumbs{display:flex!important;list-style:none;gap:.5em;margin:0;padding:0}
.ge-breadcrumbs li+li:before{content:"/ ";color:#6c757d}
.container-fluid{padding:1em 1.5em}
.row{display:flex;flex-wrap:wrap;gap:1.5em}
.col-lg-2{flex:0 0 15em}
.col-md-10,.col-lg-10{flex:1 1 40em;min-width:0}
table{border-collapse:collapse;margin:.5em 0 1em}
td,th{border:1px solid #dee2e6;padding:.3em .6em;vertical-align:top;text-align:left}
th{background:#f1f3f5}
pre,code{white-space:pre-wrap;word-break:break-word;font-size:13px}
.show-scrollbars{overflow:auto}
.modal,.ge-walkthrough-modal,button,.btn,.sticky,footer,a[data-toggle]{display:none}
.collapse{display:block}
.alert{padding:.6em 1em;border:1px solid #dee2e6;border-radius:4px;background:#f8f9fa;margin:.5em 0}
.maopd-mark{font-weight:600;white-space:nowrap}
.maopd-pass{color:#1e7b34}
.maopd-fail{color:#b02a37}
.maopd-note{margin:1em 1.5em;padding:.6em 1em;border-left:4px solid #6c757d;background:#f8f9fa;max-width:60em}
.maopd-index{max-width:70em;margin:1em 1.5em}
"""


@dataclass(frozen=True)
class Validation:
    """One validation of the site, as the index lists it."""

    table: str  # the table (GE's data asset)
    suite: str  # the expectation suite
    success: bool
    passed: int  # expectations met
    total: int


_CDN_LINK = re.compile(r"<link\b[^>]*\bhref=\"https?://[^\"]*\"[^>]*>\s*", re.I)
_CDN_SCRIPT = re.compile(r"<script\b[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>\s*", re.I)
_INLINE_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>\s*", re.I | re.S)
_CDN_IMG = re.compile(r"(<img\b[^>]*\bsrc=\")https?://[^\"]*(\")", re.I)
_CSS_URL = re.compile(r"url\((['\"]?)https?://[^)]*\1\)", re.I)
_ICON = re.compile(r"<i\b[^>]*\bclass=\"([^\"]*)\"[^>]*>\s*</i>", re.I)
_REMOTE = re.compile(r"<(?:script|link|img|iframe|source|video|audio)\b[^>]*\b(?:src|href)=\"(?:https?:)?//"
                     r"|url\(['\"]?(?:https?:)?//", re.I)


def _icon(match: re.Match) -> str:
    classes = match.group(1).split()
    if "fa-check-circle" in classes:
        return PASS_MARK
    if "fa-times" in classes or "fa-times-circle" in classes:
        return FAIL_MARK
    return ""


def _note() -> str:
    return f'<p class="maopd-note">{html.escape(RUN_TIME_NOTE)}</p>\n'


def offline_page(text: str, to_root: str) -> str:
    """One GE page without anything remote; `to_root` is the relative path to the site root."""
    text = _CDN_SCRIPT.sub("", text)
    text = _INLINE_SCRIPT.sub("", text)
    text = _CDN_LINK.sub("", text)
    text = _CDN_IMG.sub(lambda m: f"{m.group(1)}{to_root}static/images/logo-long.png{m.group(2)}", text)
    text = _CSS_URL.sub("none", text)
    text = _ICON.sub(_icon, text)
    text = text.replace("</head>", f"<style>{STYLE}</style>\n</head>", 1)
    text = re.sub(r"(<body\b[^>]*>)", lambda m: m.group(1) + "\n" + _note(), text, count=1)
    remote = _REMOTE.search(text)
    if remote:
        found = text[remote.start():remote.start() + 120]
        raise RuntimeError(f"a Data Docs page still loads from the network: {found}")
    return text


def _page(site: Path, pattern: str) -> str | None:
    found = sorted(site.glob(pattern))
    return found[0].relative_to(site).as_posix() if found else None


def index_page(site: Path, source: str, validations: list[Validation]) -> str:
    """The site's index: a plain table of every validation (no script)."""
    rows = []
    for v in validations:
        page = _page(site, f"validations/**/{source}-{v.table}.html")
        suite_page = _page(site, f"expectations/{v.suite.replace('.', '/')}.html")
        name = f'<a href="{html.escape(page)}">{html.escape(v.table)}</a>' if page else html.escape(v.table)
        suite = (f'<a href="{html.escape(suite_page)}">{html.escape(v.suite)}</a>' if suite_page
                 else html.escape(v.suite))
        rows.append(f"<tr><td>{PASS_MARK if v.success else FAIL_MARK}</td><td>{name}</td>"
                    f"<td>{v.passed} of {v.total}</td><td>{suite}</td><td>pipeline-validation</td>"
                    f"<td>1970-01-01 00:00 UTC (a constant, see above)</td></tr>")
    failed = sum(not v.success for v in validations)
    verdict = (f"{len(validations)} validations, all passed" if not failed
               else f"{len(validations)} validations, {failed} failed")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>Data Docs: {html.escape(source)}</title>\n"
            f"<link rel=\"shortcut icon\" href=\"static/images/favicon.ico\" type=\"image/x-icon\">\n"
            f"<style>{STYLE}</style>\n</head>\n<body>\n"
            f"<nav><img src=\"static/images/logo-long.png\" alt=\"Great Expectations\"></nav>\n"
            f"<div class=\"maopd-index\">\n<h1>Data Docs: {html.escape(source)}</h1>\n"
            f"<p>Great Expectations validation results of the pipeline's <code>{html.escape(source)}</code> "
            f"checks: {verdict}. Each row links its validation page (every expectation with its result) and its "
            f"expectation suite.</p>\n{_note()}"
            f"<h2>Validation results</h2>\n<table class=\"maopd-validations\">\n<thead><tr><th>status</th>"
            f"<th>validation (table)</th><th>expectations met</th><th>expectation suite</th><th>run name</th>"
            f"<th>run time</th></tr></thead>\n<tbody>\n" + "\n".join(rows) + "\n</tbody></table>\n</div>\n"
            "</body></html>\n")


def make_offline(site: Path, source: str, validations: list[Validation]) -> None:
    """Rewrite the GE site under `site` in place (module doc); `source` is the name GE's pages
    prefix each validation with (the data source, the suite's first part)."""
    for page in sorted(site.rglob("*.html")):
        rel = page.relative_to(site)
        if rel == Path("index.html"):
            continue
        to_root = os.path.relpath(site, page.parent).replace(os.sep, "/") + "/"
        page.write_text(offline_page(page.read_text(encoding="utf-8"), to_root), encoding="utf-8")
    css = site / "static" / "styles" / "data_docs_default_styles.css"
    if css.is_file():
        css.write_text(_CSS_URL.sub("none", css.read_text(encoding="utf-8")), encoding="utf-8")
    (site / "index.html").write_text(index_page(site, source, validations), encoding="utf-8")

"""Every link in ``docs/*.md`` and ``README.md`` resolves (issue 21): a relative link names a file
or folder that exists, its ``#anchor`` a heading of that page (the mkdocs slug or GitHub's, since
the README renders on GitHub and the pages on the site); an ``http(s)://`` link is well-formed (no
network: it is not fetched). Links inside code (fenced blocks, inline code) are not links."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?(?:\s+[\"'(].*?[\"')])?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ID = re.compile(r"<[a-zA-Z][^>]*\s(?:id|name)=[\"']([^\"']+)[\"']")


def _prose_lines(text: str, *, keep_code: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans removed (unless ``keep_code``)."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            continue
        if fence is None:
            out.append((n, line if keep_code else _CODE_SPAN.sub("", line)))
    return out


def _heading_text(raw: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    return text.replace("`", "").replace("**", "").replace("*", "")


def mkdocs_slug(text: str) -> str:
    """Python-Markdown's toc slug (what mkdocs uses): ASCII, punctuation dropped, lowercase,
    runs of spaces and hyphens to one ``-``."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation other than ``-``/``_`` dropped, each
    space one ``-``."""
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page: each heading's slug in both styles (with the ``_1`` / ``-1`` suffixes
    of repeated headings) and HTML ``id``/``name`` attributes."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose_lines(page.read_text(encoding="utf-8"), keep_code=True):
        m = _HEADING.match(line)
        if m:
            text = _heading_text(m.group(2))
            for sep, slug in (("_", mkdocs_slug(text)), ("-", github_slug(text))):
                k = seen.get(sep + slug, 0)
                found.add(slug if k == 0 else f"{slug}{sep}{k}")
                seen[sep + slug] = k + 1
        found.update(_HTML_ID.findall(line))
    return found


def links(page: Path) -> list[tuple[int, str]]:
    out = []
    for n, line in _prose_lines(page.read_text(encoding="utf-8")):
        out += [(n, t) for t in _INLINE.findall(line)]
        out += [(n, t) for t in _AUTOLINK.findall(line)]
        m = _REF_DEF.match(line)
        if m:
            out.append((n, m.group(1)))
    return out


def check_link(page: Path, target: str) -> str | None:
    """Why ``target`` (a link on ``page``) is broken, or None."""
    if not target:
        return "empty link"
    parts = urlsplit(target)
    if parts.scheme in ("http", "https"):
        host = parts.hostname or ""
        if not re.fullmatch(r"[A-Za-z0-9.-]+", host) or ("." not in host and host != "localhost"):
            return f"malformed URL (host {host!r})"
        if re.search(r"\s", target):
            return "URL with whitespace"
        return None
    if parts.scheme == "mailto":
        return None if "@" in parts.path else "malformed mailto"
    if parts.scheme or parts.netloc:
        return f"unexpected scheme {parts.scheme!r}"
    path, anchor = unquote(parts.path), unquote(parts.fragment)
    file = (page.parent / path).resolve() if path else page
    if not file.exists():
        return f"{path} does not exist"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"#{anchor} is not a heading of {file.name}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page: Path) -> None:
    found = links(page)
    broken = [f"{page.relative_to(ROOT)}:{n}: ({t}) {why}" for n, t in found
              if (why := check_link(page, t)) is not None]
    assert not broken, "\n".join(broken)


def test_checker_catches_broken_links(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# Getting started: `LibreYOLO(...)` & more\n\n## Same\n\n## Same\n\n"
                    "```\n[not a link](nowhere.md)\n```\n"
                    "[ok](#getting-started-libreyolo-more) [ok2](#same_1) [gh](#same-1) `[code](x.md)`\n"
                    "[gone](missing.md) [bad](#no-such-heading) [url](https://bad_host/x) [h](http://nohost)\n",
                    encoding="utf-8")
    found = [t for _, t in links(page)]
    assert found == ["#getting-started-libreyolo-more", "#same_1", "#same-1", "missing.md", "#no-such-heading",
                     "https://bad_host/x", "http://nohost"]
    why = {t: check_link(page, t) for t in found}
    assert [t for t, w in why.items() if w is None] == found[:3]
    assert "does not exist" in why["missing.md"] and "not a heading" in why["#no-such-heading"]
    assert mkdocs_slug("CUDA graphs / training (G-3)") == "cuda-graphs-training-g-3"
    assert github_slug("CUDA graphs / training (G-3)") == "cuda-graphs--training-g-3"

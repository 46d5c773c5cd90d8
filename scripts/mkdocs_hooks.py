"""MkDocs hooks (mkdocs.yml's ``hooks:``): pages of the site made from Markdown files outside docs/.

The changelog (CHANGELOG.md) and the examples' index (examples/README.md) are written where
a reader of the repository looks for them. Their site pages (docs/changelog.md,
docs/examples.md) hold only a note saying so; at build time this hook puts the file's text in
their place, so the site never carries a hand-kept copy. Links in those files are relative
to the file's own folder, as GitHub resolves them: a link to a page under docs/ is rewritten
to point at that page of the site, and a link to any other file of the repository (which the
site does not carry) becomes the path in code (after the link's text, unless that was code). A link to a file that does
not exist is an error, so strict mode fails the build as it does for a broken link in docs/.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Site page (relative to docs/) -> the repository file whose text it shows.
INCLUDED_PAGES = {
    "changelog.md": "CHANGELOG.md",
    "examples.md": "examples/README.md",
}

# Inline Markdown links: [text](target). Fenced code is left alone by the caller.
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>[^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")

log = logging.getLogger("mkdocs.hooks.ortops")


def _rewrite_link(match: re.Match[str], source: str, page: str) -> str:
    text, target = match["text"], match["target"]
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
        return match[0]  # a URL or an anchor of the page itself: unchanged
    path, _, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    if resolved.startswith("../") or not (ROOT / resolved).exists():
        log.warning(f"{source} (shown as docs/{page}) links to {target}, which does not exist")
        return match[0]
    if resolved.startswith("docs/"):
        relative = posixpath.relpath(resolved.removeprefix("docs/"), posixpath.dirname(page) or ".")
        return f"[{text}]({relative}{'#' + anchor if anchor else ''})"
    # A file of the repository that is not a page of the site.
    # A link written as code (`` [`demo.py`](demo.py) ``) or as the path becomes the path in
    # code; another keeps its text and gives the path after it.
    return f"`{resolved}`" if text.startswith("`") or text == resolved else f"{text} (`{resolved}`)"


def _rewrite_links(markdown: str, source: str, page: str) -> str:
    lines, in_fence = [], False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line.lstrip()):
            in_fence = not in_fence
        lines.append(line if in_fence else _LINK.sub(lambda m: _rewrite_link(m, source, page), line))
    return "".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    source = INCLUDED_PAGES.get(page.file.src_uri)
    if source is None:
        return markdown
    return _rewrite_links((ROOT / source).read_text(), source, page.file.src_uri)

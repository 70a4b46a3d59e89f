"""The documentation works offline: no built page loads a script or a stylesheet over the network.

``docs/conf.py`` runs :func:`refuse_remote_assets` after every HTML build (a warning per offending page,
an error under ``-W``); ``tests/test_docs_coverage.py`` runs :func:`remote_assets` on a build it finds.
"""

from __future__ import annotations

import re
from pathlib import Path

#: ``<script src=...>`` and ``<link href=...>`` (stylesheets, preloads, icons) that load over the network
REMOTE_ASSET = re.compile(r"""<(?:script[^>]*\ssrc|link[^>]*\shref)\s*=\s*["']((?:https?:)?//[^"']+)["']""",
                          re.IGNORECASE)


def remote_assets(html: str) -> list[str]:
    """The URLs of scripts and linked assets (stylesheets, fonts, icons) that ``html`` loads from the network.

    Plain hyperlinks (``<a href="https://...">``) are fine offline; ``<link rel="canonical">`` and other
    non-loading relations are ignored."""
    found = []
    for match in REMOTE_ASSET.finditer(html):
        tag = html[match.start():html.find(">", match.start()) + 1]
        rel = re.search(r"""\srel\s*=\s*["']([^"']+)["']""", tag, re.IGNORECASE)
        if tag[1:5].lower() == "link" and rel and rel.group(1).lower() in ("canonical", "alternate", "author",
                                                                           "license", "next", "prev", "search"):
            continue
        found.append(match.group(1))
    return found


def refuse_remote_assets(app, exception):
    """After an HTML build: warn (an error under -W) for every page that loads a script or stylesheet from
    the network, since the site must work offline."""
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    for page in sorted(Path(app.outdir).rglob("*.html")):
        urls = remote_assets(page.read_text(encoding="utf-8", errors="replace"))
        if urls:
            logger.warning("%s loads %s from the network (the site must work offline)",
                           page.relative_to(app.outdir), ", ".join(sorted(set(urls))))

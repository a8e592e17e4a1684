"""mkdocs hook: the notebook pages work offline.

* After the build, plotly.js (from the installed ``plotly`` package, with no CDN address inside,
  :func:`perm_circuits.views.html.offline_plotly`) and the circuitsvis bundle (from the installed
  ``circuitsvis`` wheel) are written to ``assets/javascripts/`` in the site, where
  ``overrides/main.html`` loads them on the notebook pages.  Neither is committed.
* Each notebook page's HTML (mkdocs-jupyter) loses any ``<script>`` that would load from a remote
  host or has an empty ``src`` (nbconvert's MathJax and mermaid loaders point at a CDN or, with no
  URL configured, at nothing; the notebooks use neither).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_REMOTE_SCRIPT = re.compile(r"<script\b[^>]*\bsrc\s*=\s*(?:[\"']?(?:https?:)?//[^>]*|\"\"|'')>\s*</script>", re.IGNORECASE)
_REMOTE_MODULE = re.compile(r"<script\b[^>]*type\s*=\s*[\"']?module[\"']?[^>]*>(?:(?!</script>).)*?"
                            r"(?:from|import\s*\()\s*[\"'`](?:https?:)?//(?:(?!</script>).)*</script>",
                            re.IGNORECASE | re.DOTALL)


def _views_html(config):
    src = str(Path(config.config_file_path).resolve().parent / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    from perm_circuits.views import html

    return html


def on_page_content(html, page, config, files):
    if not page.file.src_uri.startswith("notebooks/"):
        return html
    return _REMOTE_MODULE.sub("", _REMOTE_SCRIPT.sub("", html))


def on_post_build(config):
    from plotly.offline import get_plotlyjs

    views = _views_html(config)
    folder = Path(config.site_dir) / "assets" / "javascripts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plotly.min.js").write_text(views.offline_plotly(get_plotlyjs()), encoding="utf-8")
    (folder / "circuitsvis.js").write_text(views.circuitsvis_bundle_js(), encoding="utf-8")

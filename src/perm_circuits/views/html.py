"""Offline HTML page assembly for circuitsvis views and plotly figures.

Everything produced here works with no internet:

* the circuitsvis React bundle comes from the installed wheel
  (``circuitsvis/dist/cdn/iife.js``) and is inlined into the page, once;
* plotly.js comes from the installed ``plotly`` package and is either inlined, once, or -- for
  pages written together (the report, the sweep report) -- saved once beside them as
  ``plotly-<version>.min.js`` (:func:`write_plotly_js`) and loaded by a relative
  ``<script src="plotly-<version>.min.js">``, so a folder of pages holds one 3.5 MB copy;
* no ``<script src=...>`` or ``<link href=...>`` to a remote host is emitted (a relative local
  script is fine: it loads over ``file://``).

We never call circuitsvis' ``RenderedHTML._repr_html_`` (it probes
``http://google.com`` to pick between local and CDN HTML) nor ``str()`` on a
``RenderedHTML`` (CDN HTML loading from unpkg), nor its ``render_local`` (which
re-reads the bundle per view and may shell out to ``yarn`` in dev mode).
"""

from __future__ import annotations

import html as _html
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Protocol, runtime_checkable
from perm_circuits._util import atomic_write_text
from perm_circuits.checks import check_str

__all__ = [
    "PLOTLY_JS_MARKER",
    "MountableView",
    "Section",
    "circuitsvis_bundle_js",
    "foreign_plotly_js",
    "html_page",
    "local_script_refs",
    "mount_html",
    "plotly_js_file_name",
    "plotly_js_inline",
    "remote_resource_refs",
    "script_json",
    "write_plotly_js",
]

#: Name of the global the circuitsvis IIFE bundle defines.
CIRCUITSVIS_GLOBAL = "CircuitsVis"

#: HTML attribute marking a div that a circuitsvis component is mounted into.
VIEW_ATTR = "data-circuitsvis"

_SOURCE_MAP_RE = re.compile(r"^\s*//# sourceMappingURL=.*$", re.MULTILINE)
_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIV_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_REMOTE_REF_RE = re.compile(
    r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)\s*=\s*[\"']?"
    r"(?:https?:)?//[^\"'\s>]*",
    re.IGNORECASE,
)
_REMOTE_IMPORT_RE = re.compile(r"(?:\bfrom|\bimport\s*\()\s*[\"'`](?:https?:)?//[^\"'`]*", re.IGNORECASE)
_UNPKG_RE = re.compile(r"unpkg\.com", re.IGNORECASE)
_SCRIPT_SRC_RE = re.compile(r"<script\b[^>]*\bsrc\s*=\s*[\"']?([^\"'\s>]+)", re.IGNORECASE)
# a relative path to a file beside the page or below it: no scheme, no leading "/", no ".." segment
_LOCAL_SRC_RE = re.compile(r"^(?![A-Za-z][A-Za-z0-9+.-]*:)(?!/)(?!.*(?:^|/)\.\.(?:/|$))[^\s\"'<>]+\.js$")


@runtime_checkable
class MountableView(Protocol):
    """Anything ``html_page`` can mount: a circuitsvis component plus props."""

    title: str

    def mount_html(self, div_id: str) -> str:
        """Return a ``<div>`` plus a script rendering the view into it.

        The script assumes the circuitsvis bundle is already loaded.
        """
        ...


@dataclass(frozen=True)
class Section:
    """One headed section of a page: a circuitsvis view or raw HTML.

    Attributes:
        heading: Text of the ``<h2>`` above the body (escaped; empty for none).
        body: A view (e.g. ``OfflineView``) or an HTML fragment such as
            ``fig.to_html(full_html=False, include_plotlyjs=False)``.
    """

    heading: str
    body: MountableView | str


SectionLike = Section | MountableView | str


def _escape_script_text(js: str) -> str:
    """JavaScript safe to inline in a ``<script>``: ``</script`` (only ever inside literals or comments,
    where ``<\\/script`` means the same) and ``<!--`` are escaped."""
    js = re.sub(r"</(script)", r"<\\/\1", js, flags=re.IGNORECASE)
    return js.replace("<!--", "<\\!--")


@lru_cache(maxsize=1)
def circuitsvis_bundle_js() -> str:
    """The prebuilt circuitsvis browser bundle, ready to inline in a ``<script>``.

    Read from the installed wheel (``circuitsvis/dist/cdn/iife.js``); no
    node/npm/yarn is involved. The ``sourceMappingURL`` comment is dropped so
    devtools never asks for the (unshipped-in-page) map.

    Raises:
        FileNotFoundError: if the installed circuitsvis has no prebuilt bundle.
    """
    bundle = resources.files("circuitsvis").joinpath("dist", "cdn", "iife.js")
    if not bundle.is_file():
        raise FileNotFoundError(
            f"circuitsvis prebuilt bundle not found at {bundle}; "
            "reinstall circuitsvis from PyPI (the wheel ships dist/cdn/iife.js)"
        )
    js = bundle.read_text(encoding="utf-8")
    return _escape_script_text(_SOURCE_MAP_RE.sub("", js))


TOPOJSON_LOCAL = "./topojson/"
"""Where inlined plotly.js looks for map data (geo traces only, which we never draw), instead of its CDN."""

# Content-delivery hosts that plotly.js names in code paths for geo and map traces (topojson, map
# styles, icon sprites), which these pages never draw.  The inlined copy points them at local paths,
# so a page holds no CDN address at all and could not reach one even if such a trace were added.
_TOPOJSON_CDN = re.compile(r"https://cdn\.plot\.ly/un/")
_OTHER_CDNS = re.compile(r"https://(?:cdn\.jsdelivr\.net|(?:[a-z]+\.)*cartocdn\.com)/")
OFFLINE_PLACEHOLDER = "./offline-unavailable/"


def offline_plotly(text: str) -> str:
    """Point every CDN address inside plotly.js (geo/map traces only) at a local path."""
    return _OTHER_CDNS.sub(OFFLINE_PLACEHOLDER, _TOPOJSON_CDN.sub(TOPOJSON_LOCAL, text))


@lru_cache(maxsize=1)
def plotly_js_inline() -> str:
    """plotly.js from the installed ``plotly`` package, ready to inline, with no CDN address."""
    return _escape_script_text(_plotly_js_text())


def plotly_js_file_name() -> str:
    """File name of the shared plotly.js copy: ``plotly-<installed plotly.js version>.min.js``."""
    from plotly.offline import get_plotlyjs_version

    return f"plotly-{get_plotlyjs_version()}.min.js"


@lru_cache(maxsize=1)
def _plotly_js_text() -> str:
    """plotly.js from the installed ``plotly`` package with no CDN address."""
    from plotly.offline import get_plotlyjs

    return offline_plotly(get_plotlyjs())


PLOTLY_JS_MARKER = "/* perm_circuits: offline copy of plotly.js"
"""The first line of the plotly.js copy :func:`write_plotly_js` saves: the mark of a copy it may replace."""


@lru_cache(maxsize=1)
def _plotly_js_file_text() -> str:
    """The saved copy: :data:`PLOTLY_JS_MARKER`, then plotly.js with no CDN address."""
    from plotly.offline import get_plotlyjs_version

    return f"{PLOTLY_JS_MARKER} {get_plotlyjs_version()}, rewritten by perm_circuits */\n" + _plotly_js_text()


def foreign_plotly_js(folder: str | os.PathLike[str]) -> Path | None:
    """The ``plotly-<version>.min.js`` in ``folder`` when perm_circuits did not write it (it lacks
    :data:`PLOTLY_JS_MARKER` and is not an earlier unmarked copy of exactly this text); else None."""
    path = Path(folder) / plotly_js_file_name()
    if not os.path.lexists(path):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            if handle.read(len(PLOTLY_JS_MARKER)) == PLOTLY_JS_MARKER:
                return None
        text = _plotly_js_text()
        if path.stat().st_size == len(text.encode("utf-8")) and path.read_text(encoding="utf-8") == text:
            return None
    except OSError:
        pass
    return path


def write_plotly_js(folder: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Save plotly.js (with no CDN address, see :func:`offline_plotly`) once into ``folder``.

    Pages in ``folder`` load it with ``html_page(..., include_plotlyjs=path.name)``.  The file is
    written atomically (temporary file + rename) and left alone when it already holds exactly
    this text, so pages written together, or written again, share one copy.  A file of that name
    that perm_circuits did not write (:func:`foreign_plotly_js`) is refused unless ``force``.

    Returns:
        The path of the saved file, ``folder/plotly-<version>.min.js``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder {str(folder)!r} does not exist or is not a folder")
    path = folder / plotly_js_file_name()
    text = _plotly_js_file_text()
    if path.is_file() and path.stat().st_size == len(text.encode("utf-8")) and path.read_text(encoding="utf-8") == text:
        return path
    if not force and foreign_plotly_js(folder) is not None:
        raise ValueError(f"{str(path)!r} exists and perm_circuits did not write it; move it away, or pass "
                         "force=True (CLI: --force) to overwrite it")
    return atomic_write_text(path, text)


def _plotly_head_script(include_plotlyjs: bool | str) -> str | None:
    """The ``<head>`` script for ``html_page``'s ``include_plotlyjs``; None for no plotly.js."""
    if include_plotlyjs is False:
        return None
    if include_plotlyjs is True:
        return f'<script type="text/javascript">{plotly_js_inline()}</script>'
    if isinstance(include_plotlyjs, str) and _LOCAL_SRC_RE.match(include_plotlyjs):
        return f'<script type="text/javascript" src="{_html.escape(include_plotlyjs)}"></script>'
    raise ValueError(
        "include_plotlyjs must be True (inline), False (none) or the relative path of a local .js "
        f"file beside the page such as {plotly_js_file_name()!r} (no URL, no absolute path, no '..'), "
        f"got {include_plotlyjs!r}"
    )


def script_json(value: object) -> str:
    """JSON-encode ``value`` for embedding as a literal inside a ``<script>``.

    ``<``, ``>`` and ``&`` are written as ``\\u`` escapes (they can only occur
    inside JSON strings), so token text like ``</script>`` cannot end the
    script. NaN/Infinity stay as the JavaScript literals ``NaN``/``Infinity``.
    """
    text = json.dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def mount_html(div_id: str, component: str, props_json: str, *, title: str = "") -> str:
    """A container ``<div>`` and a classic script rendering ``component`` into it.

    Args:
        div_id: Unique element id (letters, digits, ``-``, ``_``).
        component: circuitsvis React component name, e.g. ``"AttentionHeads"``.
        props_json: Script-safe JSON object of props (see ``script_json``).
        title: Optional ``title`` attribute of the container.

    Returns:
        HTML that expects the global ``CircuitsVis`` (the bundle) to be loaded.
    """
    if not _DIV_ID_RE.match(div_id):
        raise ValueError(f"div_id must match {_DIV_ID_RE.pattern}, got {div_id!r}")
    if not _IDENTIFIER_RE.match(component):
        raise ValueError(f"component must be a JS identifier, got {component!r}")
    title_attr = f' title="{_html.escape(title)}"' if title else ""
    return (
        f'<div id="{div_id}" class="pc-view" {VIEW_ATTR}="{component}"{title_attr}></div>\n'
        f"<script>{CIRCUITSVIS_GLOBAL}.render({json.dumps(div_id)}, "
        f"{CIRCUITSVIS_GLOBAL}.{component}, {props_json});</script>"
    )


def _as_section(item: SectionLike, index: int) -> Section:
    if isinstance(item, Section):
        return item
    if isinstance(item, str):
        return Section("", item)
    if isinstance(item, MountableView):
        return Section(item.title, item)
    raise TypeError(
        f"sections[{index}] must be a Section, an OfflineView or an HTML str, "
        f"got {type(item).__name__}"
    )


def _section_html(section: Section, index: int) -> str:
    heading = f"<h2>{_html.escape(section.heading)}</h2>\n" if section.heading else ""
    if isinstance(section.body, str):
        body = section.body
    elif isinstance(section.body, MountableView):
        body = section.body.mount_html(f"pc-view-{index}")
    else:
        raise TypeError(
            f"sections[{index}].body must be an OfflineView or an HTML str, "
            f"got {type(section.body).__name__}"
        )
    return f'<section class="pc-section">\n{heading}{body}\n</section>'


_PAGE_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.pc-section { margin-bottom: 24px; }
"""


def html_page(
    title: str,
    sections: Sequence[SectionLike],
    *,
    include_plotlyjs: bool | str = False,
    heading: bool = True,
    css: str | None = None,
) -> str:
    """Assemble one offline HTML page: every HTML page the library writes is built here (the report,
    task, comparison, sweep and reproduction pages, a circuitsvis view's page, a figure's page
    (:func:`perm_circuits.views.figures.write_html`) and the circuit picture's standalone page).

    The circuitsvis bundle is inlined once (only when a view is present) and
    each view is mounted in its own div; plotly.js is loaded once in ``<head>``
    (for figures embedded as ``fig.to_html(full_html=False, include_plotlyjs=False)``):
    inlined when ``include_plotlyjs`` is True, or from a local file beside the page when it is
    that file's relative path (save it with :func:`write_plotly_js`).

    Args:
        title: Page ``<title>`` and ``<h1>``.
        sections: ``Section``s, views (headed by their title) or raw HTML strings.
        include_plotlyjs: True: inline plotly.js; False: none; a relative ``.js`` path (e.g.
            ``plotly_js_file_name()``): a ``<script src>`` to that local file.  URLs, absolute
            paths and ``..`` are refused (ValueError).
        heading: open the body with ``<h1>title</h1>`` (False: a page holding one figure or picture
            that carries its own title).
        css: the page's style sheet (default the house style: a sans-serif body with a margin).

    Returns:
        The full HTML document.
    """
    check_str("title", title)
    if not isinstance(heading, bool):
        raise TypeError(f"heading must be a bool, got {type(heading).__name__}")
    if css is not None and not isinstance(css, str):
        raise TypeError(f"css must be a str or None, got {type(css).__name__}")
    if isinstance(sections, (str, Section)) or not isinstance(sections, Sequence):
        raise TypeError(f"sections must be a list, got {type(sections).__name__}")
    plotly_script = _plotly_head_script(include_plotlyjs)
    normalised = [_as_section(item, i) for i, item in enumerate(sections)]
    has_views = any(isinstance(s.body, MountableView) for s in normalised)
    head_scripts = [] if plotly_script is None else [plotly_script]
    if has_views:
        head_scripts.append(f"<script>{circuitsvis_bundle_js()}</script>")
    body = "\n".join(_section_html(s, i) for i, s in enumerate(normalised))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_html.escape(title)}</title>\n<style>{_PAGE_CSS if css is None else css}</style>\n"
        + "\n".join(head_scripts)
        + "\n</head>\n<body>\n" + (f"<h1>{_html.escape(title)}</h1>\n" if heading else "")
        + f"{body}\n</body>\n</html>\n"
    )


def remote_resource_refs(page: str) -> list[str]:
    """Remote fetches a page would make on load, found by scanning its text.

    Reports ``<script|link|img|iframe|source>`` tags whose ``src``/``href`` is
    ``http(s)://`` or protocol-relative, ES-module imports from such URLs (the
    form circuitsvis' CDN HTML uses) and any mention of the unpkg CDN host. URL strings
    that merely sit inside inlined library code (plotly.js mentions
    plotly's CDN for geo/map traces) are not reported; the browser harness
    is the ground truth for actual requests.  A ``<script src>`` to a relative local file (the
    shared plotly.js beside the page) is not remote; see :func:`local_script_refs`.

    Returns:
        The offending snippets; empty for an offline page.
    """
    patterns = (_REMOTE_REF_RE, _REMOTE_IMPORT_RE, _UNPKG_RE)
    found = [m.group(0) for pattern in patterns for m in pattern.finditer(page)]
    # any other non-relative script source (file:///..., data:, javascript:, an absolute path) too
    found += [
        m.group(0) for m in _SCRIPT_SRC_RE.finditer(page)
        if not _LOCAL_SRC_RE.match(m.group(1)) and not any(m.group(0) in f or f in m.group(0) for f in found)
    ]
    return found


def local_script_refs(page: str, folder: str | os.PathLike[str] | None = None) -> list[str]:
    """The relative local ``<script src>`` paths of ``page`` (e.g. the shared plotly.js).

    With ``folder`` (the page's folder) every one must exist there: a missing file raises
    ``FileNotFoundError`` naming it, since the page would not render.
    """
    refs = [m.group(1) for m in _SCRIPT_SRC_RE.finditer(page) if _LOCAL_SRC_RE.match(m.group(1))]
    if folder is not None:
        missing = [ref for ref in refs if not (Path(folder) / ref).is_file()]
        if missing:
            raise FileNotFoundError(f"page scripts {missing} are missing from {str(folder)!r}")
    return refs

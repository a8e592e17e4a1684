"""Offline HTML page assembly for circuitsvis views and plotly figures.

Pages work with no internet: the circuitsvis React bundle (``circuitsvis/dist/cdn/iife.js`` of the
installed wheel) is inlined once; plotly.js (the installed ``plotly`` package) is inlined once or,
for pages written together, saved once beside them (:func:`write_plotly_js`) and loaded by a
relative ``<script src>``; no ``<script src>`` or ``<link href>`` names a remote host.  We never call
circuitsvis' ``RenderedHTML._repr_html_`` (it probes ``http://google.com``), ``str()`` on a
``RenderedHTML`` (CDN HTML from unpkg) nor ``render_local`` (it re-reads the bundle per view and
may shell out to ``yarn``).
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
    "MountableView",
    "Section",
    "circuitsvis_bundle_js",
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
        """A ``<div>`` plus a script rendering the view into it (the bundle already loaded)."""
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
    """The installed wheel's prebuilt circuitsvis bundle, ready to inline, without its ``sourceMappingURL``
    (FileNotFoundError when the wheel has none)."""
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

# CDN hosts plotly.js names for geo and map traces (never drawn here): pointed at local paths, so a
# page holds no CDN address at all.
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


def write_plotly_js(folder: str | os.PathLike[str]) -> Path:
    """Save plotly.js (no CDN address, :func:`offline_plotly`) as ``folder/plotly-<version>.min.js`` and
    return its path; pages load it with ``html_page(..., include_plotlyjs=path.name)``.  Written
    atomically, and left alone when it already holds this text: pages written together share one copy.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder {str(folder)!r} does not exist or is not a folder")
    path = folder / plotly_js_file_name()
    text = _plotly_js_text()
    if path.is_file() and path.stat().st_size == len(text.encode("utf-8")) and path.read_text(encoding="utf-8") == text:
        return path
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
    """``value`` as JSON to embed inside a ``<script>``: ``<``, ``>``, ``&`` as ``\\u`` escapes (so a token
    like ``</script>`` cannot end the script); NaN/Infinity stay JavaScript's ``NaN``/``Infinity``."""
    text = json.dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def mount_html(div_id: str, component: str, props_json: str, *, title: str = "") -> str:
    """A ``<div id=div_id>`` and a script rendering the circuitsvis React ``component`` (e.g.
    ``"AttentionHeads"``) with ``props_json`` (:func:`script_json`) into it; needs the global
    ``CircuitsVis`` (the bundle) loaded."""
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
) -> str:
    """One offline HTML document titled ``title`` (``<title>`` and ``<h1>``).

    ``sections``: ``Section``s, views (headed by their title) or raw HTML strings; the circuitsvis
    bundle is inlined once when a view is present, each view mounted in its own div.
    ``include_plotlyjs`` (for figures embedded with ``include_plotlyjs=False``): True inlines
    plotly.js in ``<head>``, False leaves it out, a relative ``.js`` path (e.g. :func:`write_plotly_js`'s
    file) loads that local file; URLs, absolute paths and ``..`` are refused (ValueError).
    """
    check_str("title", title)
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
        f"<title>{_html.escape(title)}</title>\n<style>{_PAGE_CSS}</style>\n"
        + "\n".join(head_scripts)
        + f"\n</head>\n<body>\n<h1>{_html.escape(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


def remote_resource_refs(page: str) -> list[str]:
    """The snippets of ``page`` that would fetch from the network on load (empty for an offline page).

    ``<script|link|img|iframe|source>`` tags whose ``src``/``href`` is ``http(s)://`` or
    protocol-relative, or any other non-relative script source; ES-module imports from such URLs
    (circuitsvis' CDN HTML); any mention of unpkg.  URLs inside inlined library code (plotly.js names
    its CDN for geo traces) and relative local scripts (:func:`local_script_refs`) are not reported.
    """
    patterns = (_REMOTE_REF_RE, _REMOTE_IMPORT_RE, _UNPKG_RE)
    found = [m.group(0) for pattern in patterns for m in pattern.finditer(page)]
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

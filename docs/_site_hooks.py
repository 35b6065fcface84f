"""MkDocs hooks (mkdocs.yml `hooks:`): the generated reference pages read as prose.

The docstrings are written for Python readers (reST roles such as :class:`X`, ``Example::``
before a literal block), and mkdocs-click prints click's "no default" marker of flags without a
default as ``Sentinel.UNSET``; the hooks render them as plain code, a colon, and an empty cell.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:class|func|mod|meth|data|attr|exc|obj):(?=<code)")
_LITERAL_MARK = re.compile(r"::(?=\s*</p>)")
_UNSET = re.compile(r"<code>Sentinel\.UNSET</code>")


def on_page_content(html: str, **kwargs: object) -> str:
    """The page's HTML with reST roles dropped, ``::`` made ``:`` and ``Sentinel.UNSET`` blank."""
    return _UNSET.sub("", _LITERAL_MARK.sub(":", _ROLE.sub("", html)))

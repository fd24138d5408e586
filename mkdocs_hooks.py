"""MkDocs hooks for the documentation site (mkdocs.yml's ``hooks:``).

The docstrings use Sphinx's cross-reference roles (``:class:`Agent```, ``:func:`~x.y```), which
Markdown renders as the role's name followed by the code: this writes them as the code alone
(the last dotted part for a ``~`` reference, as Sphinx shows it).
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|exc|obj|const|type):<code>(~?)([^<]*)</code>")


def _code(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return ROLE.sub(_code, html)

"""``EAGER_IMPORT``: resolve every kernel at import, so that a broken configuration or backend shows at once.

The SPEC 1 switch is set for a whole process tree, often for every library at once, so lazyops' own tools must
survive it: a project that has lazyops installed but does not use it runs pytest with lazyops' plugin loaded, and
``lazyops list`` is how a user finds out what is wrong. Both import ``lazyops`` only as the parent package of their
own module (``lazyops.pytest_plugin``, ``lazyops.__main__``), and Python runs the package's ``__init__`` first. So
the rule: when ``lazyops`` is imported for one of those modules, the error is kept on the namespace
(``eager_error``) for the tool to report its own way (the plugin in the session header, the CLI as one line and
its exit status) and every access raises it again as usual; any other ``import lazyops`` raises it.

Which module is being imported is read from the import machinery's frames (the names ``importlib`` and ``runpy``
are importing). Where that cannot be read (another Python implementation), the import raises, as before.
"""

from __future__ import annotations

import sys
from typing import Any

from lazyops._errors import LazyopsError

TOOLS = frozenset({"lazyops.__main__", "lazyops.pytest_plugin"})
# The import machinery's frames: frozen in CPython ("<frozen runpy>"), plain files elsewhere.
_IMPORTERS = ("importlib._bootstrap>", "runpy>", "_bootstrap.py", "runpy.py")


def resolve_at_import(state: Any) -> None:
    try:
        state.eager_resolve()
    except LazyopsError as error:
        if not _imported_for_a_tool():
            raise
        state.eager_error = error


def _imported_for_a_tool() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_IMPORTERS):
            local = frame.f_locals
            if local.get("name") in TOOLS or local.get("mod_name") in TOOLS:
                return True
        frame = frame.f_back  # type: ignore[assignment]
    return False

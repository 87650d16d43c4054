"""What :func:`lazyops.transformers.patch` did, per module: the kernel, the backend it resolved to, and why.

The backend and the reason are ``lazyops.which``'s for the configuration the module builds (``selected``,
``inherited``, ``plan``, ``declined``, ``fallback-list``); a module left as it is says why in ``detail``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

COLUMNS = ("module", "class", "kernel", "backend", "why")


@dataclass(frozen=True)
class Row:
    """One module: ``kernel`` None when it is left stock (``detail`` says why)."""

    path: str
    module: str
    kernel: str | None = None
    backend: str | None = None
    reason: str | None = None
    detail: str = ""

    @property
    def patched(self) -> bool:
        return self.kernel is not None

    def cells(self) -> tuple[str, ...]:
        why = self.reason or "stock"
        return (
            self.path,
            self.module,
            self.kernel or "—",
            self.backend or "—",
            f"{why}: {self.detail}" if self.detail else why,
        )


@dataclass
class Report:
    """The rows of one :func:`~lazyops.transformers.patch` call, in the model's module order; ``family`` is the
    model's ``config.model_type``; ``print(report)`` shows a plain table, ``report.print()`` a rich one where rich is
    installed, ``report.to_json()`` the same rows as JSON."""

    family: str
    rows: list[Row] = field(default_factory=list)

    @property
    def patched(self) -> list[Row]:
        return [row for row in self.rows if row.patched]

    @property
    def stock(self) -> list[Row]:
        return [row for row in self.rows if not row.patched]

    def kernels(self) -> dict[str, str]:
        """``{module path: kernel}`` of the patched modules (a module with two kernels: joined by ``+``)."""
        found: dict[str, str] = {}
        for row in self.patched:
            found[row.path] = f"{found[row.path]}+{row.kernel}" if row.path in found else str(row.kernel)
        return found

    def to_json(self, **dumps: Any) -> str:
        return json.dumps({"family": self.family, "rows": [asdict(row) for row in self.rows]}, **dumps)

    def __str__(self) -> str:
        rows = [COLUMNS, *(row.cells() for row in self.rows)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
        lines = [
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
            for row in rows
        ]
        summary = f"lazyops.transformers: {len(self.patched)} kernels in {self.family}, {len(self.stock)} modules stock"
        return "\n".join([summary, *(line.rstrip() for line in lines)])

    def print(self) -> None:
        """The table through rich (colour on a terminal); plain text where rich is not installed."""
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            print(self)
            return
        table = Table(title=f"lazyops.transformers: {self.family}", title_justify="left")
        for column in COLUMNS:
            table.add_column(column, overflow="fold")
        for row in self.rows:
            table.add_row(*row.cells(), style=None if row.patched else "dim")
        Console().print(table)

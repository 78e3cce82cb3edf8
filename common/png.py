"""A matplotlib figure as PNG bytes: the one way every plot module of ours (``training.plots``, ``tuning.plots``)
renders a figure. matplotlib is imported only when a figure is rendered (the caller has drawn it, so it is
loaded by then): importing ``common`` never loads it."""

from __future__ import annotations

import io
from typing import Any

DPI = 110


def png(fig: Any) -> bytes:
    """``fig`` (a matplotlib Figure) as PNG bytes at ``DPI``, cropped to what is drawn; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()

"""common.png: the one figure -> PNG bytes helper of the plot modules (training.plots, tuning.plots); importing it
loads no matplotlib."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_figure_becomes_png_bytes_and_is_closed():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.png import png

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    data = png(fig)
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
    assert not plt.fignum_exists(fig.number)


def test_importing_it_loads_no_matplotlib():
    code = "import sys, common.png; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

"""The benchmarks' figures: matplotlib without a display, and a figure written whole or not at all."""

from __future__ import annotations

import os


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed); imported on first use, so a report without a
    figure never needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str, dpi: int = 110) -> None:
    """Writes `fig` as the PNG `path` through a temporary file in the same folder and a rename (a failed run leaves
    the previous figure, never half of one), then closes it."""
    tmp = path + ".tmp.png"
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
        pyplot().close(fig)

"""bench/figures.py: a benchmark figure is written whole or not at all."""

import os

import pytest

from bench import figures


def test_a_figure_that_fails_to_save_leaves_the_previous_one(tmp_path, monkeypatch):
    plt = figures.pyplot()
    path = str(tmp_path / "report.png")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    figures.save(fig, path)
    before = open(path, "rb").read()
    assert before.startswith(b"\x89PNG")

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])

    def half_then_fail(name, **kwargs):
        open(name, "wb").write(b"\x89PNG half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(fig, "savefig", half_then_fail)
    with pytest.raises(RuntimeError, match="disk full"):
        figures.save(fig, path)
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["report.png"]

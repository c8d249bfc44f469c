"""curves.png (coop-train's workdir, coop-report): labelled panels, the headline metric, whole
step ticks, no empty grid cells."""
import pytest

from coop_jax.eval import report

pytest.importorskip("matplotlib")

# what coop-train logs in a 2-step run: evaluations at steps 0 and 2, training rows at 1 and 2
TWO_STEPS = [
    {"step": 0, "eval/greedy_accuracy": 0.25, "eval/headline_accuracy": 0.125},
    {"step": 1, "reward_mean": 0.5, "rule_accuracy": 0.5, "kl": 0.01, "response_length": 8.0},
    {"step": 2, "reward_mean": 0.75, "rule_accuracy": 0.75, "kl": 0.02, "response_length": 9.0,
     "eval/greedy_accuracy": 0.5, "eval/headline_accuracy": 0.375},
]


def _cells(ax) -> set[tuple[int, int]]:
    spec = ax.get_subplotspec()
    return {(r, c) for r in spec.rowspan for c in spec.colspan}


def test_two_step_run_figure():
    fig, plotted = report.curves_figure({"run": TWO_STEPS})
    assert plotted == ["reward_mean", "rule_accuracy", "eval/headline_accuracy",
                       "eval/greedy_accuracy", "kl", "response_length"]
    fig.canvas.draw()
    assert [ax.get_title() for ax in fig.axes] == plotted
    for ax in fig.axes:
        assert ax.get_ylabel() and ax.get_xlabel() == "step"
        assert ax.lines and len(ax.lines[0].get_xdata())  # no empty panel
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
    grid = fig.axes[0].get_subplotspec().get_gridspec()
    cells = [_cells(ax) for ax in fig.axes]
    assert set().union(*cells) == {(r, c) for r in range(grid.nrows) for c in range(grid.ncols)}
    assert sum(map(len, cells)) == grid.nrows * grid.ncols  # and no overlap


@pytest.mark.parametrize("n,rows", [(1, [1]), (3, [3]), (4, [2, 2]), (5, [3, 2]), (7, [3, 2, 2]),
                                    (8, [3, 3, 2])])
def test_row_lengths_fill_the_grid(n, rows):
    assert report._row_lengths(n) == rows


def test_plot_curves_writes_the_png(tmp_path):
    out = tmp_path / "curves.png"
    assert report.plot_curves({"run": TWO_STEPS[:2]}, str(out))[0] == "reward_mean"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.curves_figure({"run": [{"step": 1}]}) == (None, [])

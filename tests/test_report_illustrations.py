"""The paper's illustrations: entropy, the rows chosen by its criteria, their records and figures."""

from __future__ import annotations

import numpy as np
import pytest

import svbop
from svbop.report.figures import figure_to_png
from svbop.report.illustrations import (
    describe_rows,
    entropy_bits,
    load_image,
    pick_by_entropy,
    pick_top1_wrong,
    plot_entropy_panel,
    plot_image_top,
)

PNG = b"\x89PNG\r\n\x1a\n"


def _probabilities(seed=0, n=400, K=10):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    logits = rng.normal(size=(n, K)) * rng.uniform(0.1, 6, size=(n, 1))
    logits[np.arange(n), y] += rng.uniform(-1, 5, n)
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True), y


def test_entropy_in_bits():
    K = 8
    P = np.vstack([np.full(K, 1 / K), np.eye(K)[3], [0.5, 0.5] + [0.0] * (K - 2)])
    assert entropy_bits(P) == pytest.approx([3.0, 0.0, 1.0])


def test_pick_by_entropy_follows_the_paper():
    P, y = _probabilities()
    rows = pick_by_entropy(P, y, n=3, spec="fbeta:beta=5")
    H = entropy_bits(P[rows])
    assert len(rows) == 3 and np.all(np.diff(H) > 0)
    assert (P[rows[:2]].argmax(axis=1) == y[rows[:2]]).all()  # the first ones are right
    last = rows[-1]
    assert P[last].argmax() != y[last] and y[last] in svbop.predict_sets(P[[last]], "fbeta:beta=5")[0]
    # it is the most uncertain such row
    wrong = np.flatnonzero(P.argmax(axis=1) != y)
    ok = [r for r in wrong if y[r] in svbop.predict_sets(P[[r]], "fbeta:beta=5")[0]]
    assert entropy_bits(P[[last]])[0] == pytest.approx(entropy_bits(P[ok]).max())
    # a perfect classifier: the most uncertain row closes the panel
    Pp = np.eye(4)[[0, 1, 2, 3, 0]] * 0.7 + 0.075
    Pp[4] = [0.4, 0.2, 0.2, 0.2]
    got = pick_by_entropy(Pp, np.array([0, 1, 2, 3, 0]), n=3)
    assert got[-1] == 4 and np.all(np.diff(entropy_bits(Pp[got])) >= 0)


def test_pick_top1_wrong_criteria_hold_for_every_row():
    P, y = _probabilities(1)
    rows = pick_top1_wrong(P, y, n=5, spec="fbeta:beta=1", k=5)
    assert len(rows) == 5
    sets = svbop.predict_sets(P[rows], "fbeta:beta=1")
    for r, s in zip(rows, sets):
        top5 = np.argsort(-P[r], kind="stable")[:5]
        assert top5[0] != y[r] and y[r] in top5 and y[r] in s
    sizes = [len(s) for s in sets]
    assert sizes == sorted(sizes, key=lambda x: x >= 5)  # sets smaller than the top-k come first
    assert pick_top1_wrong(np.eye(3), np.arange(3)).size == 0  # nothing wrong: nothing to show


def test_describe_rows_records_equal_the_exact_sets():
    P, y = _probabilities(2)
    rows = pick_top1_wrong(P, y, n=3)
    names = [f"c{i}" for i in range(10)]
    specs = ["fbeta:beta=5", "fbeta:beta=1"]
    texts = {int(r): "x" * 400 for r in rows}
    recs = describe_rows(P, y, rows, names, specs, k=5, texts=texts, text_chars=50)
    for rec, r in zip(recs, rows):
        assert set(rec) == {"row", "truth", "entropy_bits", "top1_correct", "text", "sets", "top"}
        assert rec["row"] == r and rec["truth"] == names[y[r]] and not rec["top1_correct"]
        for spec in specs:
            lab = svbop.utility(spec).label
            assert rec["sets"][lab] == [names[c] for c in svbop.predict_sets(P[[r]], spec)[0]]
            assert [t["name"] for t in rec["top"] if t["in_full"][lab]] == [
                n for n in rec["sets"][lab] if n in [t["name"] for t in rec["top"]]]
        assert len(rec["top"]) == 5 and sum(t["truth"] for t in rec["top"]) == 1
        assert rec["text"] == "x" * 50 + "…"
    with pytest.raises(ValueError, match="class_names"):
        describe_rows(P, y, rows, names[:3], specs)


def test_figures_render(tmp_path):
    P, y = _probabilities(3)
    rows = pick_by_entropy(P, y, n=3)
    recs = describe_rows(P, y, rows, [str(i) for i in range(10)], ["fbeta:beta=5", "fbeta:beta=2", "fbeta:beta=1"])
    images = [np.random.default_rng(i).integers(0, 255, (28, 28), dtype=np.uint8) for i in range(3)]
    fig = plot_entropy_panel(images, recs, ["fbeta_5", "fbeta_2", "fbeta_1"])
    assert len(fig.axes) == 4 and figure_to_png(fig).startswith(PNG)
    rgb = np.zeros((20, 30, 3), dtype=np.uint8)
    assert figure_to_png(plot_image_top(rgb, recs[-1], "fbeta_1")).startswith(PNG)
    with pytest.raises(ValueError, match="one record per image"):
        plot_entropy_panel(images[:2], recs, ["fbeta_5"])
    from PIL import Image

    Image.fromarray(rgb).save(tmp_path / "a.png")
    assert load_image(tmp_path / "a.png").shape == (20, 30, 3)
    (tmp_path / "b.jpg").write_bytes(b"not an image")
    with pytest.raises(ValueError, match="b.jpg"):
        load_image(tmp_path / "b.jpg")


def test_utility_family_figures():
    from svbop.report.figures import plot_fbeta_family, plot_genreject_family

    fig = plot_fbeta_family((0.5, 1, 5), K=50)
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert len(lines) == 4 and lines[-1].get_linestyle() == "--"
    assert np.allclose(lines[1].get_ydata(), svbop.utility("fbeta:beta=1", K=50).values())
    assert np.allclose(lines[-1].get_ydata(), 1 / np.arange(1, 51))
    fig = plot_genreject_family(Ks=(10, 100), betas=(0.5, 2))
    panels = [a for a in fig.axes if a.get_lines()]
    assert len(panels) == 2 and all(len(a.get_lines()) == 2 * 2 + 1 for a in panels)
    # one legend for both panels: the beta colours, the alpha styles, g_P; legible (>= 10 pt)
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 2 + 2 + 1 and all(t.get_fontsize() >= 10 for t in legend.get_texts())
    # alpha = 1 makes g(K) = 0 < 1/K: never lower-bounded by precision, and the figure says so under each panel
    for ax in panels:
        assert ax.svbop_flags["not ≥ g_P"]["1"] == ["0.5", "2"]
    notes = [t.get_text() for a in fig.axes if not a.get_lines() for t in a.texts]
    assert len(notes) == 2 and all("not ≥ $g_P$: " in n and "α = 1 (every β)" in n for n in notes)
    png = figure_to_png(fig)
    assert png.startswith(PNG)
    from PIL import Image
    import io

    assert float(Image.open(io.BytesIO(png)).text["svbop:min-font-px"]) >= 10 * 120 / 72 - 0.01
    with pytest.raises(ValueError, match="no beta"):
        plot_fbeta_family(())
    with pytest.raises(ValueError, match="K"):
        plot_genreject_family(Ks=(1,))


def test_entropy_is_printed_sensibly():
    from svbop.report.illustrations import entropy_text

    assert [entropy_text(h) for h in (0.0, 1e-9, 0.004, 0.005, 0.4149, 2.5)] == [
        "< 0.01", "< 0.01", "< 0.01", "0.01", "0.41", "2.50"]


def test_illustrations_fall_back_to_a_dataset_of_the_run_of_the_right_kind():
    from svbop.report.illustrations import illustration_dataset, input_kind

    datasets = {"digits": {"source": {"builtin": "digits"}}, "synthetic1000": {"source": {"synthetic": {}}},
                "dbpedia": {"format": {"kind": "csv_text"}}, "voc2006": {"format": {"kind": "image_list"}},
                "bacteria": {"format": {"kind": "fasta"}}, "lshtc1": {"format": {"kind": "libsvm"}}}
    assert [input_kind(d) for d in datasets.values()] == ["images", None, "texts", "images", "texts", None]
    run = ["synthetic1000", "digits"]
    assert illustration_dataset("entropy", "digits", run, datasets) == "digits"  # configured and run
    assert illustration_dataset("image_top", "voc2006", run, datasets) == "digits"  # not run: an image dataset that is
    assert illustration_dataset("text_top", "dbpedia", run, datasets) is None  # no text in the run
    assert illustration_dataset("text_top", "dbpedia", [*run, "bacteria"], datasets) == "bacteria"
    assert illustration_dataset("text_top", "synthetic1000", run, datasets) == "synthetic1000"  # as configured
    with pytest.raises(ValueError, match="panel_d"):
        illustration_dataset("panel_d", "digits", run, datasets)


def test_figures_record_their_smallest_font(tmp_path):
    import io

    from PIL import Image

    from svbop.report.figures import MIN_FONT_KEY, LEGEND_PT, min_font_px, plot_utilities, save_figure

    fig = plot_utilities(["fbeta:beta=1"], K=10)
    assert min_font_px(fig, dpi=72) == LEGEND_PT  # legend and ticks at 10 pt; titles larger
    fig.axes[0].text(1, 0.5, "tiny", fontsize=6)
    assert min_font_px(fig, dpi=120) == pytest.approx(6 * 120 / 72, abs=0.01)
    save_figure(fig, tmp_path / "f.png")
    assert float(Image.open(tmp_path / "f.png").text[MIN_FONT_KEY]) == pytest.approx(10.0, abs=0.01)
    assert float(Image.open(io.BytesIO(figure_to_png(fig))).text[MIN_FONT_KEY]) == pytest.approx(10.0, abs=0.01)

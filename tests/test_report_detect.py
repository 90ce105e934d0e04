import numpy as np

from svbop.report.run import detect_outputs


def test_detect_outputs_reads_every_block_and_stops_at_logits(tmp_path):
    """--outputs auto: probabilities only when every row of every block is non-negative, finite and
    sums to 1 within SUM_TOLERANCE (checked block by block in float64, the last block included)."""
    K = 1 << 18  # blocks of 4 rows: 9 rows are three blocks
    P = np.zeros((9, K), dtype=np.float32)
    P[np.arange(9), np.arange(9) * 7] = 1.0
    np.save(tmp_path / "p.npy", P)
    assert detect_outputs(tmp_path / "p.npy") == "probabilities"
    for row, col, value in ((8, 5, 1e-5), (8, 0, np.nan), (0, 1, -1e-3)):
        bad = P.copy()
        bad[row, col] = value
        np.save(tmp_path / "bad.npy", bad)
        assert detect_outputs(tmp_path / "bad.npy") == "logits", (row, col, value)
    np.save(tmp_path / "small.npy", np.array([[0.25, 0.75], [0.5, 0.5]]))
    assert detect_outputs(tmp_path / "small.npy") == "probabilities"
    np.save(tmp_path / "flat.npy", np.array([0.25, 0.75]))
    assert detect_outputs(tmp_path / "flat.npy") == "logits"

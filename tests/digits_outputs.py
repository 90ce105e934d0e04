"""Real model outputs made offline: scikit-learn's bundled handwritten digits (1,797 8x8 images, 10
classes), a multinomial logistic regression trained on 300 of them after a 6-component PCA (a weak
model on purpose: accuracy 0.85 on the other 1,497, from 0.65 on the 9s to 0.95 on the 0s and 6s),
and its probabilities on the 1,497 rows it did not see.  Tests draw calibration and test rows from
these (label shift, label noise, calibration metrics)."""

from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=1)
def digits_outputs() -> tuple[np.ndarray, np.ndarray]:
    """``(P, y)``: the model's probabilities (1497, 10) on its held-out rows, and their labels."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression

    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(y.size)
    X, y = X[order], y[order]
    pca = PCA(6, random_state=0).fit(X[:300])
    model = LogisticRegression(max_iter=2000).fit(pca.transform(X[:300]), y[:300])
    P = model.predict_proba(pca.transform(X[300:]))
    P.setflags(write=False)
    y = y[300:].astype(np.int64)
    y.setflags(write=False)
    return P, y


def digits_logits() -> tuple[np.ndarray, np.ndarray]:
    """``(Z, y)``: the same rows as logits (log-probabilities, up to a per-row constant)."""
    P, y = digits_outputs()
    return np.log(np.maximum(P, 1e-300)), y

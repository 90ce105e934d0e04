"""Clustered class-conditional calibration (``class_conditional="clustered"``).

Ding, Angelopoulos, Bates, Jordan and Tibshirani, "Class-conditional conformal prediction with
many classes", NeurIPS 2023.  With few calibration rows per class, one threshold per class is
``inf`` for most classes (every class kept); one threshold for all ignores that classes differ.
Clustered calibration groups classes whose score distributions look alike and gives each cluster
one threshold from the rows of all its classes.  As in the authors' code and TorchCP's
``ClusteredPredictor`` (their defaults, which svbop follows):

1. ``n_min = max(min_c n_c, n_thresh)`` with ``n_c`` the rows of class ``c`` and ``n_thresh`` the
   fewest rows a finite quantile needs (:func:`svbop.conformal.min_calibration_rows`); ``m`` the
   classes with at least ``n_min`` rows; ``n_clustering = floor(n_min m / (75 + m))`` rows per
   class go to clustering, ``n_clusters = floor(n_clustering / 2)`` (unless given).
2. Each calibration row goes to the clustering part with probability ``n_clustering / n_min``
   (seeded), the others to the calibration part.
3. A class with fewer than ``n_thresh`` clustering rows is *rare*: it joins the null cluster.
4. Every other class is embedded as the 0.5, 0.6, 0.7, 0.8 and 0.9 quantiles of its clustering
   scores; k-means (k-means++ starts, 10 of them, weights ``sqrt(n_c)``) clusters the embeddings.
5. Each cluster's threshold is the conformal quantile of the calibration part's scores of its
   classes; a cluster with too few of them for a finite quantile joins the null cluster.

*Two departures, both for few rows per class.*  (a) The null cluster's threshold: the authors and
TorchCP give it the marginal quantile of the calibration part (every class's rows there); here it
is the quantile of *every* row of the null cluster's rare classes, clustering part included, and
of the calibration-part rows of the classes of clusters too small (the Mondrian quantile of the
null cluster as one more cluster).  A rare class's scores take no part in
the clustering (only its row count does), so its clustering rows can calibrate: with 10 rows per
class, where most classes are rare, TorchCP's null threshold comes from about half the rows and
its sets are about 30 % larger than marginal LAC's, here from nearly all of them.  (b) When no
clustering happens (step 4 needs more non-rare classes than clusters, and at least 2 clusters),
every class gets the marginal threshold from *all* calibration rows: the split conformal set.
So it does when ``n_clustering`` is below ``n_thresh``: a typical class then has too few
clustering rows to be anything but rare, and the few classes that are not would be clustered
from a handful of rows and calibrated on a handful more (on CIFAR-100-like outputs with 10 rows
per class, following the authors there gave sets 9 % larger than marginal LAC's and a larger
class coverage gap; with their null cluster, 30 % larger).  With 10 rows per class and
``K = 100`` (``n_clustering = 5``) the sets are the marginal ones; with 20 rows per class and
``K = 1000`` (``n_clustering = 18``, 9 clusters) they are clustered.

*Coverage.*  The clusters are learnt from the clustering rows of the non-rare classes (their
scores) and from the row counts; given them, a test pair is exchangeable with the calibration rows
of its label's cluster (the null cluster's: all its rows), so coverage is at least ``1 - epsilon``
within every cluster (a Mondrian calibration by cluster), hence marginally.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ._common import _order_statistic
from .class_conditional import _class_quantiles
from .mondrian import min_calibration_rows

__all__ = ["clustered_quantiles", "cluster_parameters"]

#: The score quantiles that embed a class (the authors').
EMBEDDING_LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9)


def cluster_parameters(counts: np.ndarray, eps: Fraction) -> tuple[int, float, int]:
    """The authors' rule from the rows per class: ``(n_clusters, fraction of the rows for
    clustering, clustering rows per class)``."""
    n_thresh = min_calibration_rows(eps)
    n_min = max(int(counts.min()) if counts.size else 0, n_thresh)
    m = int((counts >= n_min).sum())
    n_clustering = (n_min * m) // (75 + m)
    return n_clustering // 2, n_clustering / n_min, n_clustering


def _kmeans(X: np.ndarray, w: np.ndarray, k: int, rng: np.random.Generator, n_init: int = 10,
            max_iter: int = 300) -> np.ndarray:
    """Weighted k-means (Lloyd, k-means++ starts, the best of ``n_init`` by weighted inertia): labels."""
    n = X.shape[0]
    best, best_labels = np.inf, np.zeros(n, dtype=np.int64)
    for _ in range(n_init):
        centres = np.empty((k, X.shape[1]))
        centres[0] = X[rng.choice(n, p=w / w.sum())]
        d = ((X - centres[0]) ** 2).sum(axis=1)
        for j in range(1, k):
            p = w * d
            centres[j] = X[rng.choice(n, p=p / p.sum())] if p.sum() > 0 else X[rng.integers(n)]
            d = np.minimum(d, ((X - centres[j]) ** 2).sum(axis=1))
        labels = None
        for _ in range(max_iter):
            D = ((X[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
            new = D.argmin(axis=1)
            if labels is not None and np.array_equal(new, labels):
                break
            labels = new
            for j in range(k):
                member = labels == j
                if member.any():
                    centres[j] = (w[member, None] * X[member]).sum(axis=0) / w[member].sum()
        inertia = float((w * ((X - centres[labels]) ** 2).sum(axis=1)).sum())
        if inertia < best:
            best, best_labels = inertia, labels
    return best_labels


def clustered_quantiles(s: np.ndarray, y: np.ndarray, K: int, eps: Fraction, n_clusters: int | None,
                        u: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-class thresholds of clustered calibration and each class's cluster (``-1``: null).

    ``s``, ``y``: the calibration scores and labels; ``u``: one uniform per row (the split);
    ``seed``: k-means' starts.
    """
    counts = np.bincount(y, minlength=K)
    auto_clusters, fraction, n_clustering = cluster_parameters(counts, eps)
    M = auto_clusters if n_clusters is None else n_clusters
    clusters = np.full(K, -1, dtype=np.int64)
    clustering = u < fraction
    n_thresh = min_calibration_rows(eps)
    cl_counts = np.bincount(y[clustering], minlength=K)
    common = np.flatnonzero(cl_counts >= n_thresh)
    if n_clustering < n_thresh or not (common.size > M and M > 1):  # the marginal threshold from every row
        q = _order_statistic(s, eps)
        return np.full(K, q), clusters
    ys, ss = y[clustering], s[clustering]
    emb = np.empty((common.size, len(EMBEDDING_LEVELS)))
    order = np.lexsort((ss, ys))
    bounds = np.searchsorted(ys[order], np.arange(K + 1))
    for i, c in enumerate(common.tolist()):
        emb[i] = np.quantile(ss[order[bounds[c] : bounds[c + 1]]], EMBEDDING_LEVELS)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(3,)))
    clusters[common] = _kmeans(emb, np.sqrt(cl_counts[common].astype(np.float64)), M, rng)
    cal = ~clustering  # a clustered class calibrates on the rows the clustering did not see
    # a cluster with too few of those rows for a finite quantile joins the null cluster
    few = np.bincount(clusters[y[cal & (clusters[y] >= 0)]], minlength=M) < n_thresh
    clusters[(clusters >= 0) & few[np.maximum(clusters, 0)]] = -1
    label_cluster = clusters[y]
    rare = np.zeros(K, dtype=bool)
    rare[cl_counts < n_thresh] = True
    # the null cluster: every row of its rare classes (their scores took no part in the clustering)
    # and the calibration-part rows of the classes of the clusters too small
    null = rare[y] | (cal & (label_cluster < 0))
    q_null = _order_statistic(s[null], eps)
    cal &= label_cluster >= 0
    q_cluster = _class_quantiles(s[cal], label_cluster[cal], M, eps)
    q = np.where(clusters >= 0, q_cluster[np.maximum(clusters, 0)], q_null)
    return q, clusters

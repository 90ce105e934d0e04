"""Issue 56, the library's side: costs that follow a user's input are bounded or refused up front
(group patterns of the conditional sets, the 2-means tree over sparse feature ids), pairwise
Venn-Abers scores of rows with two zero probabilities, and sizes claimed by a file checked against
the file before anything is allocated."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

from svbop.trees import balanced_kmeans_tree, class_profiles

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads ru_maxrss in kB (Linux)")


# --------------------------------------------------------------------------------------------
# balanced_kmeans_tree: memory follows the non-zeros, not the feature ids
# --------------------------------------------------------------------------------------------


@linux
def test_kmeans_tree_memory_follows_the_non_zeros_not_the_feature_ids():
    """1,500 non-zeros over 2^27 feature ids: the tree's scratch arrays were 8 bytes per feature id
    (class sums, the splitter's column map, the root's centroids): 3.3 GB peak. Now a few MB."""
    code = textwrap.dedent("""
        import resource
        import numpy as np, scipy.sparse as sp
        from svbop.trees import balanced_kmeans_tree
        rng = np.random.default_rng(0)
        n, D, K = 300, 2**27, 30
        rows = np.repeat(np.arange(n), 5)
        X = sp.csr_matrix((rng.random(rows.size) + 0.1, (rows, rng.integers(0, D, rows.size))), shape=(n, D))
        y = rng.integers(0, K, n)
        balanced_kmeans_tree(X[:, :1000], y, K, max_leaves=4)  # compiled before measuring
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tree = balanced_kmeans_tree(X, y, K, max_leaves=4)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert tree.n_classes == K
        print(grown)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    grown_mb = int(done.stdout.split()[-1]) / 1024
    assert grown_mb < 300, f"the tree's peak memory grew by {grown_mb:.0f} MB"


def test_kmeans_tree_and_profiles_do_not_depend_on_unused_feature_ids():
    """The same tree, bit for bit, when the used features are spread over many more ids (the
    renumbering keeps their order, so every sum is taken in the same order)."""
    rng = np.random.default_rng(1)
    n, D, K = 500, 300, 60
    X = sp.random(n, D, density=0.05, random_state=rng, format="csr", dtype=np.float32)
    y = rng.integers(0, K, n)
    spread = 7 * np.arange(D) + 3  # feature j becomes id 7 j + 3 of 7 D + 5
    Xs = sp.csr_matrix((X.data, spread[X.indices], X.indptr), shape=(n, 7 * D + 5))
    tree, tree_s = (balanced_kmeans_tree(M, y, K, max_leaves=3, seed=4) for M in (X, Xs))
    np.testing.assert_array_equal(tree.parent, tree_s.parent)
    P, Ps = class_profiles(X, y, K), class_profiles(Xs, y, K)
    assert Ps.shape == (K, 7 * D + 5)
    np.testing.assert_array_equal(Ps.toarray()[:, spread], P.toarray())
    assert Ps.nnz == P.nnz

"""tf-idf features whose idf is fitted on the training rows only.

The text data sets of the paper come as term counts (or raw text, for DBpedia); the features are
their tf-idf weights.  To keep test documents from leaking into the document frequencies, the idf
is estimated on ``fit_rows`` (the training rows) and then applied to every row.  A term that never
occurs in the training rows gets the largest idf, ``ln((1 + n_fit) / 1) + 1`` with the default
smoothing.

* :func:`tfidf_features` -- term-count matrices (LSHTC1, the libSVM-style text data).
* :func:`tfidf_strings` -- raw strings: word n-grams of documents, or the k-mers of DNA /
  protein sequences (character n-grams; the paper's Bacteria 3-, 4-, 5-mers and Proteins
  3-mers), with the vocabulary fitted on the training rows too.  :func:`tfidf_texts` is the
  same with ``TfidfVectorizer``'s keyword arguments passed through.

All return ``scipy.sparse.csr_matrix`` of ``float32`` with the rows in input order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

__all__ = ["tfidf_features", "tfidf_texts", "tfidf_strings", "check_fit_rows"]

logger = logging.getLogger(__name__)

_NORMS = ("l1", "l2", None)


def check_fit_rows(fit_rows, n_rows: int, name: str = "fit_rows") -> np.ndarray:
    """Row indices (int64, in the order given) from ``None`` (all), an index array or a boolean mask.

    Raises ValueError for a mask of the wrong length, indices out of ``0 .. n_rows - 1``,
    repeated indices, a non-integer array or an empty selection.
    """
    if fit_rows is None:
        return np.arange(n_rows, dtype=np.int64)
    arr = np.asarray(fit_rows)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of row indices or a boolean mask, got shape {arr.shape}")
    if arr.dtype == bool:
        if arr.size != n_rows:
            raise ValueError(f"{name} is a boolean mask of length {arr.size} but there are {n_rows} rows")
        arr = np.flatnonzero(arr)
    elif arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integer row indices or booleans, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size == 0:
        raise ValueError(f"{name} selects no rows; the idf needs at least one document")
    bad = np.flatnonzero((arr < 0) | (arr >= n_rows))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] = {arr[bad[0]]} is not a row index in 0..{n_rows - 1}")
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{name} repeats row indices; each training row must be listed once")
    return arr


def _as_counts(counts, name: str = "counts") -> sp.csr_matrix:
    """Validate a non-negative, finite 2-D count matrix; return CSR float64."""
    if sp.issparse(counts):
        if counts.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n_documents, n_terms), got shape {counts.shape}")
        X = sp.csr_matrix(counts, dtype=np.float64)
        values = X.data
    else:
        arr = np.asarray(counts)
        if arr.dtype == object or not (
            np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating) or arr.dtype == bool
        ):
            raise ValueError(f"{name} must be a numeric matrix of term counts, got dtype {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n_documents, n_terms), got shape {arr.shape}")
        values = arr
        X = None
    if values.size:
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{name} contains NaN or infinite values")
        smallest = values.min()
        if smallest < 0:
            raise ValueError(f"{name} must be non-negative term counts, got a minimum of {smallest}")
    if X is None:
        X = sp.csr_matrix(np.asarray(counts, dtype=np.float64))
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {X.shape})")
    X.sum_duplicates()
    return X


def _check_norm(norm):
    if norm not in _NORMS:
        raise ValueError(f"norm must be 'l1', 'l2' or None, got norm={norm!r}")


def tfidf_features(
    counts,
    fit_rows=None,
    *,
    sublinear_tf: bool = False,
    norm: str | None = "l2",
    smooth_idf: bool = True,
    drop_unseen: bool = False,
) -> sp.csr_matrix:
    """tf-idf weights of a document-term count matrix, with the idf fitted on ``fit_rows``.

    scikit-learn's :class:`~sklearn.feature_extraction.text.TfidfTransformer` is fitted on
    ``counts[fit_rows]`` and applied to all rows.

    Parameters
    ----------
    counts : array-like or sparse matrix of shape (n_documents, n_terms)
        Non-negative term counts.
    fit_rows : array-like of int or bool, optional
        The training rows (indices or a boolean mask of length ``n_documents``); default all.
    sublinear_tf : bool
        Use ``1 + log(tf)`` instead of ``tf``.
    norm : {'l2', 'l1', None}
        Row normalisation after weighting.
    smooth_idf : bool
        ``idf = ln((1 + n) / (1 + df)) + 1`` (True, scikit-learn's default) or
        ``ln(n / df) + 1``.  Leave it on when the fit rows may miss terms: without smoothing a
        term absent from them would get an infinite idf.
    drop_unseen : bool
        Keep only the terms that occur in the fit rows (the training vocabulary, as
        :func:`tfidf_strings` does), in their original order.  A linear model can learn no
        weight for the others; dropping them keeps weight matrices as small as the data allows
        (term ids in the LSHTC files run to 1.2 million, of which a few percent occur).

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n_documents, n_terms), float32
        ``n_terms`` counts only the training vocabulary when ``drop_unseen``.
    """
    from sklearn.feature_extraction.text import TfidfTransformer

    X = _as_counts(counts)
    _check_norm(norm)
    rows = check_fit_rows(fit_rows, X.shape[0])
    if not smooth_idf and np.any(X[rows].getnnz(axis=0) == 0):
        raise ValueError(
            "smooth_idf=False needs every term to occur in the fit rows (some have document "
            "frequency 0 there, which gives an infinite idf); use smooth_idf=True"
        )
    seen = X[rows].getnnz(axis=0) > 0
    if drop_unseen and not seen.all():
        X = X[:, np.flatnonzero(seen)]
        logger.info("tf-idf: kept the %d of %d terms that occur in the fit rows", X.shape[1], seen.size)
    transformer = TfidfTransformer(norm=norm, use_idf=True, smooth_idf=smooth_idf, sublinear_tf=sublinear_tf)
    transformer.fit(X[rows])
    out = sp.csr_matrix(transformer.transform(X), dtype=np.float32)
    logger.info(
        "tf-idf: %d documents x %d terms, idf fitted on %d rows (%d terms absent from them), %d non-zeros",
        out.shape[0],
        out.shape[1],
        rows.size,
        int(np.sum(X[rows].getnnz(axis=0) == 0)),
        out.nnz,
    )
    return out


def _check_texts(texts, name: str = "texts") -> list[str]:
    """A list of str from a sequence (list, tuple, 1-D object array) of documents or sequences."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of documents, got a single string")
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of strings, got an array of shape {texts.shape}")
    texts = list(texts)
    if not texts:
        raise ValueError(f"{name} holds no documents")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"{name}[{i}] must be a str, got {type(t).__name__}")
    return texts


def _fit_transform(texts: list[str], fit_rows, vectorizer_kwargs: dict):
    """Fit a ``TfidfVectorizer`` on ``texts[fit_rows]``, transform all rows: (CSR float32, vectorizer)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    rows = check_fit_rows(fit_rows, len(texts))
    vectorizer_kwargs.setdefault("dtype", np.float32)
    vectorizer = TfidfVectorizer(**vectorizer_kwargs)
    vectorizer.fit([texts[i] for i in rows])
    out = sp.csr_matrix(vectorizer.transform(texts), dtype=np.float32)
    logger.info(
        "tf-idf: %d documents, vocabulary of %d terms fitted on %d rows, %d non-zeros",
        out.shape[0],
        out.shape[1],
        rows.size,
        out.nnz,
    )
    return out, vectorizer


def tfidf_texts(texts: Sequence[str], fit_rows=None, **vectorizer_kwargs) -> sp.csr_matrix:
    """tf-idf features of raw documents, with vocabulary and idf fitted on ``fit_rows``.

    scikit-learn's :class:`~sklearn.feature_extraction.text.TfidfVectorizer` is fitted on the
    texts of ``fit_rows`` and applied to all of them.  The vocabulary therefore holds the
    training terms only (terms seen only in other rows are dropped, as in any train/test split).
    See :func:`tfidf_strings` for the same with the options spelled out (and k-mers).

    Parameters
    ----------
    texts : sequence of str
        The documents (a list, or a 1-D object array such as ``Dataset.X``).
    fit_rows : array-like of int or bool, optional
        The training rows (indices or a boolean mask); default all.
    **vectorizer_kwargs
        Passed to ``TfidfVectorizer`` (e.g. ``min_df=2``, ``max_features=100_000``,
        ``sublinear_tf=True``, ``stop_words="english"``); ``dtype`` defaults to float32.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n_documents, n_terms), float32
    """
    texts = _check_texts(texts)
    return _fit_transform(texts, fit_rows, dict(vectorizer_kwargs))[0]


def tfidf_strings(
    strings: Sequence[str],
    fit_rows=None,
    *,
    analyzer: str = "word",
    ngram_range: tuple[int, int] = (1, 1),
    lowercase: bool = True,
    min_df: int | float = 1,
    max_features: int | None = None,
    sublinear_tf: bool = False,
    norm: str | None = "l2",
    return_vocabulary: bool = False,
) -> sp.csr_matrix | tuple[sp.csr_matrix, list[str]]:
    """tf-idf of documents (word n-grams) or DNA / protein sequences (k-mers), fitted on ``fit_rows``.

    scikit-learn's :class:`~sklearn.feature_extraction.text.TfidfVectorizer` learns the
    vocabulary and the idf from ``strings[fit_rows]`` only and transforms every row, so a term
    (or k-mer) that occurs only outside the fit rows has no column and is ignored; with the
    default ``smooth_idf`` the idf is ``ln((1 + n_fit) / (1 + df)) + 1``.

    The paper's settings: **Bacteria** (16S rRNA) ``analyzer="char", ngram_range=(3, 5)`` (the
    3-, 4- and 5-mers); **Proteins** ``analyzer="char", ngram_range=(3, 3)``; text data sets
    ``analyzer="word"``.

    Parameters
    ----------
    strings : sequence of str
        One document or sequence per row (a list, or a 1-D object array such as ``Dataset.X``).
    fit_rows : array-like of int or bool, optional
        The training rows (indices or a boolean mask); default all.
    analyzer : {"word", "char", "char_wb"}
        ``"word"``: n-grams of tokens (scikit-learn's default token pattern: runs of 2+ word
        characters).  ``"char"``: every overlapping run of ``n`` characters of the whole string
        -- exactly the k-mers of a sequence (``"ACGTA"`` with ``(3, 3)`` gives ``ACG``, ``CGT``,
        ``GTA``); runs of white space are first collapsed to one space, and n-grams do span
        it, so sequences must not contain spaces.  ``"char_wb"``: character n-grams inside
        space-padded words (``" AC"``, ..., ``"TA "``) -- not k-mers.
    ngram_range : (int, int)
        Smallest and largest ``n`` (inclusive).
    lowercase : bool
        Lower-case before counting (for sequences this merges soft-masked lower-case bases
        with upper-case ones; the feature names are then lower-case).
    min_df : int or float
        Ignore terms in fewer fit rows than this (an int) or a smaller fraction of them (a
        float in (0, 1]).
    max_features : int, optional
        Keep only the ``max_features`` terms most frequent in the fit rows.
    sublinear_tf : bool
        Use ``1 + ln(tf)`` instead of ``tf``.
    norm : {"l2", "l1", None}
        Row normalisation after weighting.
    return_vocabulary : bool
        Also return the feature names (terms / k-mers), one per column.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_rows, n_terms), float32
    vocabulary : list of str
        Only with ``return_vocabulary=True``: the term of every column.

    Raises
    ------
    ValueError
        For a non-string row (naming its index), bad options, bad ``fit_rows``, or an empty
        vocabulary (e.g. every fit row empty, or ``min_df`` too high).
    """
    texts = _check_texts(strings, "strings")
    if analyzer not in ("word", "char", "char_wb"):
        raise ValueError(f"analyzer must be 'word', 'char' or 'char_wb', got analyzer={analyzer!r}")
    try:
        lo, hi = (int(v) if float(v) == int(v) else None for v in ngram_range)
    except (TypeError, ValueError):
        lo = hi = None
    if lo is None or hi is None or not 1 <= lo <= hi:
        raise ValueError(f"ngram_range must be two integers 1 <= min_n <= max_n, got ngram_range={ngram_range!r}")
    _check_norm(norm)
    if max_features is not None and (isinstance(max_features, bool) or not isinstance(max_features, (int, np.integer)) or max_features < 1):
        raise ValueError(f"max_features must be a positive integer or None, got max_features={max_features!r}")
    if isinstance(min_df, bool) or not isinstance(min_df, (int, float, np.integer, np.floating)):
        raise ValueError(f"min_df must be an int >= 1 or a float in (0, 1], got min_df={min_df!r}")
    if isinstance(min_df, (float, np.floating)):
        if not 0 < min_df <= 1:
            raise ValueError(f"min_df as a fraction must lie in (0, 1], got min_df={min_df!r}")
        min_df = float(min_df)
    elif min_df < 1:
        raise ValueError(f"min_df as a count must be >= 1, got min_df={min_df!r}")
    else:
        min_df = int(min_df)
    kwargs = dict(
        analyzer=analyzer,
        ngram_range=(lo, hi),
        lowercase=bool(lowercase),
        min_df=min_df,
        max_features=None if max_features is None else int(max_features),
        sublinear_tf=bool(sublinear_tf),
        norm=norm,
    )
    try:
        out, vectorizer = _fit_transform(texts, fit_rows, kwargs)
    except ValueError as exc:
        if "vocabulary" in str(exc) or "min_df" in str(exc) or "max_df" in str(exc):
            raise ValueError(f"tf-idf ({analyzer} {lo}-{hi}-grams, min_df={min_df}): {exc}") from None
        raise
    if return_vocabulary:
        return out, [str(t) for t in vectorizer.get_feature_names_out()]
    return out

"""Arrays from where models live: numpy, torch (CPU or GPU), JAX, pandas, anything with DLPack.

Every public function of svbop that takes probabilities or labels passes them through
:func:`as_host_array` first, so a model's outputs can be handed over as they come: a torch tensor
(also one that requires grad, or one on a GPU), a JAX array, a pandas DataFrame or Series, or any
object with ``__array__`` or ``__dlpack__``.  The data is moved to host memory **once**, at that
boundary, and everything after it runs on the numpy array, so the results are those of the same
numpy array.  None of torch, JAX or pandas is imported here: objects are recognised by what they
can do (duck typing), so svbop depends on none of them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["as_host_array"]

#: DLPack's ``kDLCPU``: the only device numpy can read without a copy.
_DLPACK_CPU = 1

#: Array kinds that hold numbers svbop can use: bool, signed and unsigned integer, float.
_NUMERIC_KINDS = "biuf"


def _is_sparse(x) -> bool:
    """A scipy.sparse matrix or array (recognised without importing scipy.sparse)."""
    return hasattr(x, "nnz") and hasattr(x, "toarray")


def _dlpack_device(x):
    """The DLPack device type of ``x`` (1 is the CPU), or None when ``x`` does not say."""
    get = getattr(x, "__dlpack_device__", None)
    if get is None:
        return None
    try:
        return int(get()[0])
    except (BufferError, RuntimeError, TypeError, ValueError):  # a device DLPack has no code for: not the CPU
        return -1


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (messages of svbop are one line)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _to_host(x, name: str):
    """An object in device memory (a CUDA tensor, a JAX array on a GPU) copied to host memory once."""
    cpu = getattr(x, "cpu", None)
    if callable(cpu):  # torch (and any library with torch's spelling)
        return cpu()
    if hasattr(x, "__array__"):  # JAX: __array__ copies from the device
        return x
    try:  # numpy >= 2.1 asks the producer for a host copy through DLPack itself
        return np.from_dlpack(x, device="cpu")
    except (TypeError, BufferError, ValueError, RuntimeError) as exc:
        raise ValueError(
            f"{name} is in device memory (DLPack device type {_dlpack_device(x)}) and cannot be copied to"
            f" the host ({_first_line(exc)}); move it to the CPU first"
        ) from None


def as_host_array(
    x, name: str, *, accept_sparse: bool = False, what: str = "real numbers (bool, integer or float)"
):
    """``x`` as a numpy array of numbers in host memory; numpy arrays pass through without a copy.

    Parameters
    ----------
    x : array-like
        A numpy array; a torch tensor on any device (detached from the autograd graph, copied to
        the CPU once with ``.cpu()`` when it lives elsewhere; ``bfloat16``, which numpy lacks,
        becomes float32, exactly); a JAX array (``__array__`` copies it from the device); a
        pandas DataFrame or Series; any object with ``__array__`` or ``__dlpack__`` (read through
        ``np.from_dlpack``, without a copy when it is in CPU memory); or a nested sequence of numbers.
    name : str
        The argument's name, for error messages.
    accept_sparse : bool, default False
        Return a scipy.sparse matrix unchanged (for functions that take sparse input); otherwise
        a sparse matrix is refused.
    what : str
        What ``x`` must hold, for the message refusing a non-numeric dtype.

    Returns
    -------
    ndarray (or the scipy.sparse matrix itself)
        Of bool, integer or float dtype, with the shape of ``x``.  The dtype is kept (float32
        stays float32, float16 stays float16: callers decide where to compute in float64).

    Raises
    ------
    ValueError
        One line naming ``name``: a sparse matrix where none is accepted, an object or other
        non-numeric dtype (strings, a DataFrame with non-numeric columns, ragged rows), or an
        object that cannot be read as an array (e.g. one in device memory with no way to the host).
    """
    if isinstance(x, np.ndarray):
        arr = np.asarray(x)  # the array itself (a subclass becomes its ndarray view, as before)
    elif _is_sparse(x):
        if accept_sparse:
            return x
        raise ValueError(f"{name} must be a dense array; got a sparse matrix (use .toarray())")
    else:
        if getattr(x, "requires_grad", False) is True and callable(getattr(x, "detach", None)):
            x = x.detach()  # torch refuses to export a tensor that is part of an autograd graph
        device = _dlpack_device(x)
        if device is not None and device != _DLPACK_CPU:
            x = _to_host(x, name)
        if str(getattr(x, "dtype", "")) == "torch.bfloat16" and callable(getattr(x, "float", None)):
            x = x.float()  # numpy has no bfloat16; every bfloat16 is a float32
        try:
            if isinstance(x, np.ndarray) or hasattr(x, "__array__") or not hasattr(x, "__dlpack__"):
                arr = np.asarray(x)
            else:
                arr = np.from_dlpack(x)
        except (TypeError, ValueError, BufferError, RuntimeError) as exc:
            raise ValueError(
                f"{name} cannot be read as an array of numbers ({type(x).__name__}: {_first_line(exc)})"
            ) from None
    if arr.dtype.name == "bfloat16":  # ml_dtypes' bfloat16 (JAX): exactly representable in float32
        arr = arr.astype(np.float32)
    if arr.dtype.kind not in _NUMERIC_KINDS:
        hint = " (mixed types, None or missing values, or rows of unequal length?)" if arr.dtype == object else ""
        raise ValueError(f"{name} must hold {what}, got dtype {arr.dtype}{hint}")
    return arr

"""Empty stand-ins for the optional imports of TorchCP 1.2.1's non-classification parts (torchsort,
torch_geometric, transformers), shared by the cross-check tests (``tests/anchors.py``) and the benchmarks
that run TorchCP beside svbop (``bench_anchors.py``, ``bench_wsc_venn_abers.py``).

:class:`StandIns` goes last on the import path (``sys.meta_path.append(StandIns())``): only names no
installed package provides become empty modules, which the classification code never uses.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import types


def _stand_in(attr: str):
    """An empty class for any name the stand-in module is asked for, but its dunders: ``__file__``,
    ``__spec__`` ... stay missing (``inspect`` reads ``__file__`` of every module in ``sys.modules``:
    a class there broke torchvision's import later in the same process)."""
    if attr.startswith("__") and attr.endswith("__"):
        raise AttributeError(attr)
    return type(attr, (), {})


class StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    roots = ("torchsort", "torch_geometric", "transformers")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _stand_in
        return module

    def exec_module(self, module):
        pass

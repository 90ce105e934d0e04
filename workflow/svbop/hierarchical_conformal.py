"""The hierarchy-restricted conformal sets moved to :mod:`svbop.conformal.hierarchical`; this name
keeps the old imports working (``from svbop.hierarchical_conformal import ...``)."""

from .conformal.hierarchical import *  # noqa: F401,F403
from .conformal.hierarchical import __all__  # noqa: F401

"""The package version, written in this one place.

setup.py and the Makefile read it with a pattern anchored on the line
``__version__ = "X.Y.Z"`` (so keep that form: one line, double quotes) and
compile it into the library as AL_VERSION_STR; Results record it beside the
library's own al_version(), so a Python package and a library from
different builds are told apart.
"""

__version__ = "0.1.0"

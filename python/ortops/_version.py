"""The version of ortops, written only here.

CMakeLists.txt reads this line for the library's version (its CMake package and the op
manifest, ``ortops_ops.json``), setup.py for the wheel's, and ``ortops.__version__`` and
``ortops --version`` import it; tests/python/test_version.py checks that they agree and that
CHANGELOG.md's latest release is this one.
"""

__version__ = "0.1.0"

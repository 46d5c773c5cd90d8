import os
import sys
from pathlib import Path

# The helpers in ortest.py are shared by the ort/ and torch/ test folders.
sys.path.insert(0, str(Path(__file__).parent))

if os.environ.get("ORTOPS_TEST_CPU_ARENA") == "0":
    # ortest turns the CPU memory arena off for every session of the run (see its docstring),
    # also in test files that make their sessions without its helpers.
    import ortest  # noqa: F401

import sys
from pathlib import Path

# The helpers in ortest.py are shared by the ort/ and torch/ test folders.
sys.path.insert(0, str(Path(__file__).parent))

# ortest sets up every session of the run for the tests (no spinning threads; no CPU memory
# arena under the sanitizers: see its docstring), also in test files that make their sessions
# without its helpers.
import ortest  # noqa: E402, F401

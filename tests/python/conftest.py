import sys
from pathlib import Path

# The helpers in ortest.py are shared by the ort/ and torch/ test folders.
sys.path.insert(0, str(Path(__file__).parent))

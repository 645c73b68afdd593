"""Makes the source tree's python/ importable (an installed qd is found through PYTHONPATH)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

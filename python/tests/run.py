"""Runs the Python package's tests with pytest, as CTest does (test `python`):
returns 77 (CTest's skip) with a message when pytest is missing, so a machine without it
skips them rather than failing."""
import os
import sys

SKIPPED = 77  # CTest's SKIP_RETURN_CODE for the test `python`


def main():
    try:
        import pytest
    except ImportError:
        print("skipped: pytest is not installed for", sys.executable,
              "(Debian: apt-get install python3-pytest)")
        return SKIPPED
    return pytest.main(["-q", "-rs", "-p", "no:cacheprovider",
                        os.path.dirname(os.path.abspath(__file__))] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

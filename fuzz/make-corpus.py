#!/usr/bin/env python3
"""Writes the seed corpus of the text fuzz targets (qd-fuzz-parser,
qd-fuzz-sizing, qd-fuzz-reverse-ad): every `.qd` file under test/ and
examples/, split on `// -----` lines as `qd-opt --split-input-file` does,
one chunk per file named after its SHA-1 (duplicates collapse).

usage: make-corpus.py OUTDIR
"""
import hashlib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEPARATOR = re.compile(r"^// -----.*$", re.MULTILINE)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(p for d in ("test", "examples") for p in (ROOT / d).rglob("*.qd"))
    chunks = 0
    for path in files:
        for chunk in SEPARATOR.split(path.read_text()):
            if not chunk.strip():
                continue
            data = chunk.encode()
            (out / hashlib.sha1(data).hexdigest()).write_bytes(data)
            chunks += 1
    print(f"make-corpus: {chunks} chunks of {len(files)} files -> {out} "
          f"({len(list(out.iterdir()))} distinct)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

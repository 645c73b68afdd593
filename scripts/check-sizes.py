#!/usr/bin/env python3
"""Checks the size limits of docs/contributing.md on qd's C++ sources.

  files      at most 800 lines
  classes    at most 500 lines (class, struct or union bodies)
  functions  at most 120 lines (from the first line of the signature to
             the closing brace; lambdas count toward their function)

Reads clang-formatted code: comments, string and character literals (raw
strings included) are blanked first, then braces are matched. Prints every
violation as `path:line: what` and exits 1 when there is one.

  scripts/check-sizes.py [--max-file N] [--max-class N] [--max-function N]
                         [--exclude PATH]... [PATH...]
                         (default: the source directories)

--exclude leaves out a file or directory (relative to the repository root)
that is being split elsewhere.
"""
import argparse
import os
import re
import sys

SOURCE_DIRS = ["include", "lib", "runtimes", "tools", "bench", "unittests", "fuzz", "examples"]
EXTENSIONS = (".h", ".cpp", ".def", ".c")
NOT_FUNCTION = re.compile(
    r"^\s*(if|for|while|switch|else|do|try|catch|namespace|extern|return|case|default)\b|=\s*$|"
    r"\]\s*\(.*\)\s*(mutable\s*)?(->[^{]*)?$|\[[&=]?\]\s*(\(.*\))?\s*(mutable\s*)?(->[^{]*)?$")
CLASS = re.compile(r"^\s*(template\s*<.*>\s*)?(class|struct|union)\s+(\w+)[^;(]*$")


def blank(text):
    """Replaces comments and literals by spaces, keeping the newlines."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if c == "'" and i and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(c)
                i += 1
                continue
            out.append(c + " " * (j - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_brace(lines, row, col):
    """The row of the brace closing the one at lines[row][col]."""
    depth = 0
    for r in range(row, len(lines)):
        start = col if r == row else 0
        for ch in lines[r][start:]:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return r
    return len(lines) - 1


def signature_start(lines, row):
    """The first line of the declaration whose body opens on `row`."""
    r = row
    while r > 0:
        prev = lines[r - 1].rstrip()
        if not prev or prev.endswith((";", "{", "}", ":")) or prev.lstrip().startswith("#"):
            break
        r -= 1
    return r


def check(path, limits, report):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = blank(text).split("\n")
    if len(lines) - 1 > limits.max_file:
        report(path, 1, f"file has {len(lines) - 1} lines (limit {limits.max_file})")
    row = 0
    scan(lines, 0, len(lines), limits, lambda r, what: report(path, r + 1, what))


def scan(lines, first, last, limits, report):
    """Reports classes and functions in lines[first:last] (nested classes
    are scanned too; a function's body is not)."""
    row = first
    while row < last:
        line = lines[row]
        col = line.rfind("{")
        if col < 0 or "}" in line[col:]:
            row += 1
            continue
        start = signature_start(lines, row)
        head = " ".join(l.strip() for l in lines[start:row + 1])[: -(len(line) - col)].strip()
        end = match_brace(lines, row, col)
        cls = CLASS.match(head)
        if cls and "(" not in head.split(cls.group(3), 1)[0]:
            size = end - start + 1
            if size > limits.max_class:
                report(start, f"{cls.group(2)} {cls.group(3)} has {size} lines (limit {limits.max_class})")
            scan(lines, row + 1, end, limits, report)
            row = end + 1
            continue
        if "(" in head and not NOT_FUNCTION.search(head) and not head.startswith("enum"):
            size = end - start + 1
            if size > limits.max_function:
                name = re.findall(r"([~\w:]+)\s*\(", head)
                report(start, f"function {name[0] if name else head[:40]} has {size} lines "
                       f"(limit {limits.max_function})")
            row = end + 1
            continue
        if head.startswith("namespace") or head.startswith("extern") or not head:
            row += 1
            continue
        row = end + 1 if end > row else row + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-file", type=int, default=800)
    ap.add_argument("--max-class", type=int, default=500)
    ap.add_argument("--max-function", type=int, default=120)
    ap.add_argument("--exclude", action="append", default=[], metavar="PATH")
    ap.add_argument("paths", nargs="*")
    limits = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = limits.paths or [os.path.join(root, d) for d in SOURCE_DIRS]
    files = []
    for p in paths:
        if os.path.isdir(p):
            for d, _, names in os.walk(p):
                files += [os.path.join(d, n) for n in sorted(names) if n.endswith(EXTENSIONS)]
        else:
            files.append(p)
    excluded = [os.path.normpath(os.path.join(root, e)) for e in limits.exclude]
    files = [f for f in files
             if not any(os.path.abspath(f) == e or os.path.abspath(f).startswith(e + os.sep)
                        for e in excluded)]
    found = []

    def report(path, line, what):
        found.append(f"{os.path.relpath(path, root)}:{line}: {what}")

    for f in sorted(files):
        check(f, limits, report)
    for v in found:
        print(v)
    print(f"check-sizes: {len(files)} files, {len(found)} over the limits", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Follows a Markdown page literally, the way a reader would.

Markers (HTML comments, invisible when the page is rendered) say what each
fenced block is for:

  <!-- test: file NAME -->       the next block is saved as NAME
  <!-- test: run -->             each command of the next block runs, in
                                 order, in the working directory (a line
                                 ending in a backslash continues); its
                                 status must be 0
  <!-- test: run, status N -->   the same, and the last command's status
                                 must be N
  <!-- test: stdout -->          the next block is exactly what the last
  <!-- test: stderr -->          command printed there (trailing spaces and
                                 blank lines aside)
  <!-- test: excerpt PATH -->    the next block is a quote of the source
                                 file PATH (relative to the repository
                                 root, the page's directory's parent): its
                                 lines appear there consecutively, each
                                 with the same text (indentation aside)

The working directory starts empty except for `build`, a link to the build
tree, so `./build/tools/...` in the page runs the tools under test, and the
links `--link NAME=PATH` asks for (`python`, the source tree's package).
`--python PATH` makes `python3` in the page's commands that interpreter. A page
that is not followed exactly raises DocMismatch, whose message (the page's
line and what differs) is all that is printed.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

MARKER = re.compile(r"^<!-- test: (.*?) -->\s*$")
RUN = re.compile(r"run(?:, status (\d+))?")


class DocMismatch(Exception):
    """The page and what its commands do disagree."""


def report(kind, value, traceback):
    if issubclass(kind, DocMismatch):
        print(value, file=sys.stderr)
    else:
        sys.__excepthook__(kind, value, traceback)
FENCE = re.compile(r"^```")


def blocks(lines):
    """Yields (marker, block text, line number) for every marked block."""
    pending = None
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            pending = (m.group(1).strip(), i + 1)
            i += 1
            continue
        if FENCE.match(lines[i]):
            start = i
            i += 1
            body = []
            while i < len(lines) and not FENCE.match(lines[i]):
                body.append(lines[i])
                i += 1
            if pending:
                yield pending[0], "".join(body), start + 1
                pending = None
        i += 1


def normalise(text):
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def commands(text):
    out, cur = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.append(cur.strip())
        cur = ""
    return out


def excerpt_mismatch(text, path):
    """Why `text` is not a quote of the file at `path`, or None."""
    if not os.path.isfile(path):
        return f"no file {path}"
    want = [line.strip() for line in normalise(text).splitlines()]
    with open(path) as f:
        have = [line.strip() for line in f.read().splitlines()]
    for start in range(len(have) - len(want) + 1):
        if have[start:start + len(want)] == want:
            return None
    return f"{path} has no lines\n{normalise(text)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("--build", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--link", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--python")
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    os.symlink(os.path.abspath(args.build), os.path.join(args.workdir, "build"))
    for link in args.link:
        name, _, path = link.partition("=")
        os.symlink(os.path.abspath(path), os.path.join(args.workdir, name))
    env = dict(os.environ)
    if args.python:
        # Outside the working directory, which the page's commands may list.
        bin_dir = args.workdir.rstrip("/") + ".bin"
        shutil.rmtree(bin_dir, ignore_errors=True)
        os.makedirs(bin_dir)
        os.symlink(os.path.abspath(args.python), os.path.join(bin_dir, "python3"))
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    with open(args.page) as f:
        lines = f.readlines()
    last = None
    checked = 0
    where = os.path.basename(args.page)
    for marker, text, line in blocks(lines):
        at = f"{where}:{line}"
        if marker.startswith("file "):
            with open(os.path.join(args.workdir, marker[5:].strip()), "w") as f:
                f.write(text)
        elif marker.startswith("run"):
            m = RUN.fullmatch(marker)
            if not m:
                raise DocMismatch(f"{at}: unknown marker '{marker}'")
            want = int(m.group(1) or 0)
            cmds = commands(text)
            for n, cmd in enumerate(cmds):
                last = subprocess.run(cmd, shell=True, cwd=args.workdir, capture_output=True,
                                      text=True, env=env)
                expected = want if n + 1 == len(cmds) else 0
                if last.returncode != expected:
                    raise DocMismatch(f"{at}: '{cmd}' returned status {last.returncode}, the page "
                                      f"expects {expected}\nstdout:\n{last.stdout}\nstderr:\n"
                                      f"{last.stderr}")
                checked += 1
        elif marker in ("stdout", "stderr"):
            if last is None:
                raise DocMismatch(f"{at}: output block before any command")
            got = last.stdout if marker == "stdout" else last.stderr
            if normalise(got) != normalise(text):
                raise DocMismatch(f"{at}: the page shows\n{normalise(text)}\nbut the command "
                                  f"printed on {marker}\n{normalise(got)}")
            checked += 1
        elif marker.startswith("excerpt "):
            source = os.path.dirname(os.path.dirname(os.path.abspath(args.page)))
            why = excerpt_mismatch(text, os.path.join(source, marker[8:].strip()))
            if why:
                raise DocMismatch(f"{at}: the page quotes what is not in the source: {why}")
            checked += 1
        else:
            raise DocMismatch(f"{at}: unknown marker '{marker}'")
    if checked == 0:
        raise DocMismatch(f"{where}: no marked commands or outputs")
    print(f"{where}: followed {checked} commands and outputs")


if __name__ == "__main__":
    sys.excepthook = report  # an uncaught DocMismatch: its message, status 1
    main()

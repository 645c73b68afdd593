#!/usr/bin/env python3
"""Checks the links of Markdown pages: every relative link names a file or
directory that exists, and every `#anchor` (in the same page or another
Markdown page) names one of that page's headings, spelled as GitHub spells
heading anchors (lower case; punctuation other than `-` and `_` dropped;
spaces become `-`; a repeated heading gets `-1`, `-2`, ...).

With --references, the given files and directories (any text file) are
searched for mentions of pages instead: every `docs/NAME.md` they name must
exist, and a section named after it on the same line, as in
`docs/NAME.md, "Section"` or `docs/NAME.md ("Section"`, must begin a heading
of that page or the bold lead-in of one of its paragraphs (`**Section.**`),
ignoring case and backquotes.

Usage: check-links.py ROOT [--references] [PAGE.md|DIR]...
Paths are relative to ROOT (a directory is searched for *.md, or with
--references for source and text files). Links to URLs (`scheme:`) are not
followed. Prints one line per broken link (`file:line: ...`) and exits 1
when there is one; otherwise prints how many links it checked.
"""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def slug(heading):
    text = re.sub(r"<[^>]+>", "", heading)  # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                fence = None if fence == m.group(1) else (fence or m.group(1))
                continue
            if fence is None:
                yield number, line


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for _, line in prose_lines(path):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            found.update(HTML_ANCHOR.findall(line))
        cache[path] = found
    return cache[path]


SECTION_REF = re.compile(r"(docs/[a-z0-9_-]+\.md)(?:[,:]? *\(?\"([^\"]+)\")?")
BOLD_LEAD = re.compile(r"^\s*(?:[-*]\s+)?\*\*(.+?)\*\*")
SOURCE_SUFFIXES = (".md", ".h", ".cpp", ".py", ".sh", ".cmake", ".txt", ".qd", ".in", ".def")


def section_names(path, cache={}):
    """Lower-case headings and bold paragraph lead-ins of a page."""
    if path not in cache:
        names = []
        for _, line in prose_lines(path):
            for m in (HEADING.match(line), BOLD_LEAD.match(line)):
                if m:
                    names.append(m.group(m.lastindex).replace("`", "").strip().lower())
        cache[path] = names
    return cache[path]


def check_references(root, rel):
    errors, count = [], 0
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            for page, section in SECTION_REF.findall(line):
                count += 1
                where = f"{rel}:{number}"
                path = os.path.join(root, page)
                if not os.path.exists(path):
                    errors.append(f"{where}: names {page}, which does not exist")
                    continue
                want = section.replace("`", "").strip().rstrip(".").lower()
                if section and not any(n.startswith(want) for n in section_names(path)):
                    errors.append(f"{where}: names section \"{section}\" of {page}, which has no "
                                  "heading or bold paragraph lead-in beginning so")
    return errors, count


def targets(line):
    without_code = re.sub(r"`[^`]*`", "", line)
    for pattern in (LINK, IMAGE):
        yield from pattern.findall(without_code)
    m = REFERENCE.match(without_code)
    if m:
        yield m.group(1)


def check_page(root, page):
    errors, count = [], 0
    path = os.path.join(root, page)
    for number, line in prose_lines(path):
        for target in targets(line):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # a URL
            count += 1
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            where = f"{page}:{number}"
            if not os.path.exists(dest):
                errors.append(f"{where}: link to '{target}': no file {os.path.relpath(dest, root)}")
                continue
            if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                errors.append(f"{where}: link to '{target}': {os.path.relpath(dest, root)} has no "
                              f"heading with anchor '#{anchor}'")
    return errors, count


def pages(root, names, suffixes=(".md",)):
    for name in names:
        full = os.path.join(root, name)
        if os.path.isdir(full):
            for dirpath, _, files in sorted(os.walk(full)):
                for f in sorted(files):
                    if f.endswith(suffixes):
                        yield os.path.relpath(os.path.join(dirpath, f), root)
        else:
            yield name


def main():
    if len(sys.argv) < 3:
        print("usage: check-links.py ROOT [--references] [PAGE.md|DIR]...", file=sys.stderr)
        return 2
    root, names = sys.argv[1], sys.argv[2:]
    references = "--references" in names
    names = [n for n in names if n != "--references"]
    errors, count, checked = [], 0, 0
    for page in pages(root, names, SOURCE_SUFFIXES if references else (".md",)):
        if not os.path.exists(os.path.join(root, page)):
            errors.append(f"{page}: no such file")
            continue
        e, c = (check_references if references else check_page)(root, page)
        errors += e
        count += c
        checked += 1
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} broken link(s) in {checked} page(s)")
        return 1
    print(f"checked {count} {'references' if references else 'links'} in {checked} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())

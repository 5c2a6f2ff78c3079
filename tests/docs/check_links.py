#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown: every .md file of the tree.
A link to a file or folder must name one that exists, and an anchor (#...) must
name a heading (GitHub's slug of it) or an explicit id/name in the target file.
Links with a scheme (https:, mailto:, ...) are not followed. Links inside code
blocks and code spans are not links.

Usage: tests/docs/check_links.py [SOURCE_DIR]
Exits 1 listing every dead link as FILE:LINE: TARGET (why).
"""
import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^ {0,3}(```|~~~)")
# [text](target "title") and ![alt](target); the text may span lines.
INLINE_LINK = re.compile(r"\[(?:[^\[\]\\]|\\.)*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
# [label]: target
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"""<[^>]+\b(?:id|name)\s*=\s*["']([^"']+)["']""")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


SKIP_DIRS = {".git", "build", "node_modules", "__pycache__", "_deps", "third_party"}


def markdown_files(source_dir):
    """Every Markdown file of the tree (README.md, docs/**, client/**, deploy/**,
    ...), sorted, without build trees, VCS data and installed packages."""
    files = []
    for root, dirs, names in os.walk(source_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")
                         and not d.startswith("build-"))
        for name in sorted(names):
            if name.endswith(".md"):
                files.append(os.path.relpath(os.path.join(root, name), source_dir))
    return files


def blank_code(text):
    """The text with fenced code blocks and code spans replaced by spaces (newlines
    kept, so offsets still give line numbers)."""
    out, fenced = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fenced:
            if m and m.group(1) == fenced:
                fenced = None
            out.append(" " * len(line))
            continue
        if m:
            fenced = m.group(1)
            out.append(" " * len(line))
            continue
        out.append(line)
    text = "\n".join(out)
    return re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), text, flags=re.DOTALL)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor a Markdown file defines: heading slugs (duplicates get -1, -2,
    ...) and explicit id= / name= attributes."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found, counts, fenced = set(), {}, None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fenced:
            if m and m.group(1) == fenced:
                fenced = None
            continue
        if m:
            fenced = m.group(1)
            continue
        h = HEADING.match(line)
        if h:
            base = slug(h.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        found.update(HTML_ID.findall(line))
    return found


def dead_links(source_dir):
    """FILE:LINE: TARGET (why) for every relative link that does not resolve."""
    dead, cache = [], {}

    def anchors_of(path):
        if path not in cache:
            cache[path] = anchors(path)
        return cache[path]

    for rel in markdown_files(source_dir):
        path = os.path.join(source_dir, rel)
        with open(path, encoding="utf-8") as f:
            text = blank_code(f.read())
        targets = [(m.start(), m.group(1)) for m in INLINE_LINK.finditer(text)]
        targets += [(m.start(), m.group(1)) for m in REFERENCE_DEF.finditer(text)]
        for offset, target in sorted(targets):
            target = target.strip("<>")
            if SCHEME.match(target) or target.startswith("//"):
                continue
            line = text.count("\n", 0, offset) + 1
            where = f"{rel}:{line}: {target}"
            file_part, _, anchor = target.partition("#")
            file_part = urllib.parse.unquote(file_part)
            if file_part:
                if file_part.startswith("/"):
                    resolved = os.path.join(source_dir, file_part.lstrip("/"))
                else:
                    resolved = os.path.join(os.path.dirname(path), file_part)
                resolved = os.path.normpath(resolved)
                if not os.path.exists(resolved):
                    dead.append(f"{where} (no such file)")
                    continue
            else:
                resolved = path
            if anchor:
                if not resolved.endswith(".md") or os.path.isdir(resolved):
                    continue  # anchors into code files name lines (#L10): not checked
                if urllib.parse.unquote(anchor).lower() not in anchors_of(resolved):
                    dead.append(f"{where} (no heading or id #{anchor} in "
                                f"{os.path.relpath(resolved, source_dir)})")
    return dead


def main():
    source_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    files = markdown_files(source_dir)
    if not files:
        print(f"check_links: no Markdown under {source_dir}")
        return 1
    found = dead_links(source_dir)
    for line in found:
        print(line)
    print(f"check_links: {len(found)} dead link(s) in {len(files)} Markdown file(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

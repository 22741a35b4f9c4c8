#!/usr/bin/env python3
"""Checks that every #include under src/ (and in include/clformer/) points down the layer order:
both forms ("..." and <...> naming one of our folders), as the preprocessor sees them (comments
blanked, continued lines joined).

The order is read from src/README.md, the one place it is written: the lines of its first fenced block
read `RANK  FOLDER  description`; a folder may include its own headers and those of lower ranks
(folders of equal rank are peers and may not include each other). A header is placed by its path:
"FOLDER/x.h" (internal, beside its sources) or "clformer/FOLDER.h" (the public header of FOLDER).
The umbrella "clformer/clformer.h" is for users, never for sources. Exit 1, naming each offending
line, when the tree breaks the order; 2 when the order itself cannot be read.

usage: tools/check_layers.py [ROOT]   (ROOT: the repository, default the one holding this script)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def directive_lines(text):
    """The file's lines as the preprocessor sees them: comments blanked (newlines kept, so line
    numbers hold), backslash-continued lines joined onto their first line."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text[i] == '"':  # a string literal: skip it whole, so "/*" inside is not a comment
            m = re.compile(r'"(\\.|[^"\\\n])*"?').match(text, i)
            out.append(m.group(0))
            i = m.end()
        else:
            out.append(text[i])
            i += 1
    lines, joined = "".join(out).split("\n"), []
    k = 0
    while k < len(lines):
        start, line = k, lines[k]
        while line.endswith("\\") and k + 1 < len(lines):
            k += 1
            line = line[:-1] + lines[k]
        joined.append((start + 1, line))
        k += 1
    return joined


def read_order(readme):
    try:
        text = open(readme, encoding="utf-8").read()
    except OSError as e:
        sys.exit(f"check_layers: cannot read the layer order: {e}")
    block = re.search(r"```[^\n]*\n(.*?)```", text, re.S)
    if not block:
        sys.exit(f"check_layers: {readme} has no fenced block with the layer order")
    rank = {}
    for line in block.group(1).splitlines():
        m = re.match(r"\s*(\d+)\s+([a-z_]+)\b", line)
        if m:
            rank[m.group(2)] = int(m.group(1))
    if not rank:
        sys.exit(f"check_layers: {readme}: no 'RANK FOLDER description' lines in its first fenced block")
    return rank


def layer_of(header):
    """The folder an included header belongs to, or None for a form we do not know."""
    if header == "clformer/clformer.h":
        return None
    m = re.fullmatch(r"clformer/([a-z_]+)\.h", header) or re.fullmatch(r"([a-z_]+)/[\w.]+", header)
    return m.group(1) if m else None


def is_ours(inc, rank):
    """Whether an #include <...> names one of our headers (a system header is none of our business)."""
    return inc.startswith("clformer/") or layer_of(inc) in rank


def check_include(inc, own, rank):
    """Why an #include of inc from folder own breaks the order, or None."""
    to = layer_of(inc)
    if inc == "clformer/clformer.h":
        return "the umbrella header is for users; include the layers' headers"
    if to is None:
        return "not FOLDER/file.h or clformer/FOLDER.h"
    if to not in rank:
        return f"'{to}' is no layer of src/README.md"
    if to != own and rank[to] >= rank[own]:
        kind = "a peer" if rank[to] == rank[own] else "above"
        return f"{own} (rank {rank[own]}) includes {to} (rank {rank[to]}), {kind}"
    return None


def check_file(path, own, rank, shown):
    errors = []
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    for no, line in directive_lines(text):
        m = INCLUDE.match(line)
        if not m or (m.group(1) == "<" and not is_ours(m.group(2), rank)):
            continue
        why = check_include(m.group(2), own, rank)
        if why:
            errors.append(f"{shown}:{no}: #include \"{m.group(2)}\": {why}")
    return errors


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = os.path.join(root, "src")
    rank = read_order(os.path.join(src, "README.md"))
    errors, files = [], 0
    for name in sorted(os.listdir(src)):
        full = os.path.join(src, name)
        if os.path.isfile(full):
            if name != "README.md":
                errors.append(f"src/{name}: a source at the top of src/; it belongs in a layer's folder")
            continue
        if name not in rank:
            errors.append(f"src/{name}/: a folder that src/README.md does not place in the order")
            continue
        for dirpath, _, names in os.walk(full):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    p = os.path.join(dirpath, n)
                    files += 1
                    errors += check_file(p, name, rank, os.path.relpath(p, root))
    for folder in rank:
        if not os.path.isdir(os.path.join(src, folder)):
            errors.append(f"src/README.md places '{folder}', which has no folder under src/")
    public = os.path.join(root, "include", "clformer")
    for n in sorted(os.listdir(public)) if os.path.isdir(public) else []:
        own = n[:-2]
        if n == "clformer.h" or not n.endswith(".h"):
            continue
        if own not in rank:
            errors.append(f"include/clformer/{n}: a public header of no layer in src/README.md")
            continue
        files += 1
        errors += check_file(os.path.join(public, n), own, rank, f"include/clformer/{n}")
    for e in errors:
        print(e)
    print(f"check_layers: {files} files, {len(rank)} layers, {len(errors)} breaks of the order")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

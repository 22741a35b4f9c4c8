#!/usr/bin/env python3
"""Spanish -> English verse pairs from Debian's SWORD modules, for the translation experiment (issue 20).

usage: tools/bible_pairs.py OUT_DIR

Reads the Reina-Valera 1909 (sword-text-sparv) and the King James Version (sword-text-kjv) verse by
verse with diatheke (package diatheke) as plain text, aligns them by reference, leaves out the
chapters the two number differently (see main), and writes OUT_DIR/{train,valid,test}.{es,en} (one verse a line, line i of .es translated
by line i of .en) and .ref (the verse each line holds, "John 3:16"). The split is by book, so no
verse, nor its neighbours, is in two splits:
  valid: Esther, Ecclesiastes, Hebrews, James
  test:  Ruth, Jonah, John, Philippians
Each held-out book has no parallel passage elsewhere (unlike Mark or Luke, retold by Matthew, or Kings,
retold by Chronicles), and each split mixes Old Testament prose and wisdom, a Gospel and epistles.
Prints one counts line; exits 2 when diatheke or a module is missing.
"""
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

BOOKS = ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth", "I Samuel",
         "II Samuel", "I Kings", "II Kings", "I Chronicles", "II Chronicles", "Ezra", "Nehemiah", "Esther", "Job",
         "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon", "Isaiah", "Jeremiah", "Lamentations", "Ezekiel",
         "Daniel", "Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai",
         "Zechariah", "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "I Corinthians",
         "II Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "I Thessalonians",
         "II Thessalonians", "I Timothy", "II Timothy", "Titus", "Philemon", "Hebrews", "James", "I Peter", "II Peter",
         "I John", "II John", "III John", "Jude", "Revelation of John"]
SPLIT = {"Esther": "valid", "Ecclesiastes": "valid", "Hebrews": "valid", "James": "valid",
         "Ruth": "test", "Jonah": "test", "John": "test", "Philippians": "test"}
# The modules' descriptions as `diatheke -b system -k modulelist` prints them.
MODULES = {"es": "Reina Valera 1909", "en": "King James Version"}
VERSE = re.compile(r"^\s*(.+?) (\d+):(\d+):(.*)$")
STRONG = re.compile(r"\s*<[GH]\d+[a-z]?>")  # Strong's numbers the plain filter leaves in SpaRV


def fail(msg):
    print(f"bible_pairs: {msg}", file=sys.stderr)
    sys.exit(2)


def diatheke(module, key):
    out = subprocess.run(["diatheke", "-b", module, "-f", "plain", "-k", key], capture_output=True, check=True)
    return out.stdout.decode("utf-8")


def find_modules():
    listing = diatheke("system", "modulelist")
    found = {}
    for line in listing.splitlines():
        name, _, desc = line.partition(" : ")
        for lang, want in MODULES.items():
            if desc.strip() == want:
                found[lang] = name.strip()
    missing = [f"{want} ({'sword-text-sparv' if lang == 'es' else 'sword-text-kjv'})"
               for lang, want in MODULES.items() if lang not in found]
    if missing:
        fail("SWORD module missing: " + ", ".join(missing) + "; apt-get install sword-text-sparv sword-text-kjv")
    return found


def clean(text):
    text = STRONG.sub("", text).replace("\u00b6", " ")  # and the KJV's paragraph signs,
    text = text.replace("[", "").replace("]", "")  # and its editor's brackets (1 John 2:23), words kept
    return " ".join(text.split())


def parse(book, output):
    """{(chapter, verse): text} of one diatheke answer. A heading line (a psalm's title in the KJV)
    goes with verse 1, where the RV1909 has it; diatheke repeats it before later verses, and those
    copies are dropped."""
    verses, heading = {}, []
    for line in output.splitlines():
        m = VERSE.match(line)
        if m and m.group(1) == book:
            ch, v = int(m.group(2)), int(m.group(3))
            verses[(ch, v)] = clean((" ".join(heading) + " " if v == 1 else "") + m.group(4))
            heading = []
        elif line.strip() and not re.fullmatch(r"\(\w+\)", line.strip()):
            heading.append(line.strip())
    return verses


def read_book(module, book, per_chapter):
    if not per_chapter:
        return parse(book, diatheke(module, book))
    verses, ch = {}, 1
    while True:  # chapter by chapter, so a title is never carried into the next psalm
        got = parse(book, diatheke(module, f"{book} {ch}"))
        if not got or min(got)[0] != ch:
            return verses
        verses.update(got)
        ch += 1


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        fail("usage: tools/bible_pairs.py OUT_DIR")
    if not shutil.which("diatheke"):
        fail("diatheke not found; apt-get install diatheke sword-text-sparv sword-text-kjv")
    out = sys.argv[1]
    mods = find_modules()
    jobs = [(lang, book) for book in BOOKS for lang in ("es", "en")]
    with ThreadPoolExecutor(max_workers=4) as pool:
        texts = list(pool.map(lambda j: read_book(mods[j[0]], j[1], j[0] == "en" and j[1] == "Psalms"), jobs))
    text = dict(zip(jobs, texts))
    os.makedirs(out, exist_ok=True)
    files = {s: {ext: open(os.path.join(out, f"{s}.{ext}"), "w", encoding="utf-8") for ext in ("es", "en", "ref")}
             for s in ("train", "valid", "test")}
    counts, dropped = {"train": 0, "valid": 0, "test": 0}, 0
    for book in BOOKS:
        es, en = text[("es", book)], text[("en", book)]
        if not es or not en:
            fail(f"diatheke returned no verses of {book}")
        # Where the RV1909 numbers verses otherwise, the module leaves the KJV's verses empty and moves
        # their text into the verse before or the next chapter (Spanish Jonah 2:1 is KJV Jonah 1:17, all
        # of chapter 2 one verse late): such a chapter and the next are left out, never misaligned.
        skip = {ch + d for (ch, v) in set(es) | set(en) if not es.get((ch, v)) or not en.get((ch, v)) for d in (0, 1)}
        for key in sorted(set(es) | set(en)):
            if key[0] in skip:
                dropped += 1
                continue
            s = SPLIT.get(book, "train")
            files[s]["es"].write(es[key] + "\n")
            files[s]["en"].write(en[key] + "\n")
            files[s]["ref"].write(f"{book} {key[0]}:{key[1]}\n")
            counts[s] += 1
    for f in files.values():
        for h in f.values():
            h.close()
    print(f"bible_pairs: train {counts['train']}, valid {counts['valid']}, test {counts['test']} verse pairs "
          f"({sum(counts.values())} in all; {dropped} left out: chapters numbered otherwise in the RV1909) in {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The docs as a reader meets them, checked (ctest: docs_check, label unit):

  - README.md is the front door: at most README_MAX_LINES lines;
  - no dated anecdotes: no date (YYYY-MM-DD) in the prose of README.md, docs/*.md and the
    folders' README.md files, outside code (`...` and fenced blocks, where a date is an example
    of a format); bench/results/ pages, which date their measurements, are exempt;
  - every relative link [text](path) in those files resolves to a file or folder of the
    repository;
  - bench/results/train_gpu.json, which scripts read for the current GPU figures, has the
    fields bench_train_gpu --json writes.

Every key of docs/configuration.md is checked against the loaders by test_config_doc.

  python3 scripts/docs_check.py [REPO]      exit 0, or 1 with one line per finding
"""
import json
import os
import re
import sys

README_MAX_LINES = 200
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages(repo):
    """The Markdown files a reader opens: README.md, docs/, each folder's README.md."""
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build")) and d not in ("fixtures", "corpus")]
        for name in files:
            if name.endswith(".md"):
                path = os.path.relpath(os.path.join(root, name), repo)
                if path == "README.md" or path.startswith("docs/") or name == "README.md" or \
                        path.startswith("bench/results/"):
                    yield path


def prose_lines(text):
    """(line number, the line with inline code removed) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"`[^`]*`", "", line)


# bench_train_gpu --json's fields (bench/train_gpu.cpp, write_json); a number may be null
# where PyTorch's side was not run.
TRAIN_GPU_FIELDS = {"device": str, "date": str, "commit": str, "command": str, "rounds": int, "models": list}
TRAIN_GPU_MODEL_FIELDS = {"model": str, "recompute": str, "tokens_per_s": (int, float), "mfu": (int, float),
                          "torch_tokens_per_s": (int, float, type(None)), "torch_ratio": (int, float, type(None))}


def check_train_gpu_json(repo):
    path = "bench/results/train_gpu.json"
    try:
        with open(os.path.join(repo, path)) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{path}: cannot be read as JSON ({e}); bench_train_gpu --json writes it"]
    findings = []
    for where, fields, value in [(path, TRAIN_GPU_FIELDS, results)] + \
            [(f"{path}: models[{i}]", TRAIN_GPU_MODEL_FIELDS, m) for i, m in enumerate(results.get("models", []))]:
        for key, kind in fields.items():
            if not isinstance(value, dict) or not isinstance(value.get(key, ...), kind):
                findings.append(f"{where}: no {key} of the type bench_train_gpu --json writes")
    return findings


def check(repo):
    findings = check_train_gpu_json(repo)
    with open(os.path.join(repo, "README.md")) as f:
        readme_lines = len(f.read().splitlines())
    if readme_lines > README_MAX_LINES:
        findings.append(f"README.md: {readme_lines} lines, more than {README_MAX_LINES}; move the detail to docs/")
    for path in sorted(pages(repo)):
        with open(os.path.join(repo, path)) as f:
            text = f.read()
        for number, line in prose_lines(text):
            if not path.startswith("bench/results/"):
                for date in DATE.findall(line):
                    findings.append(f"{path}:{number}: a date ({date}) in a reference page; say what is, and put "
                                    f"measurements on their bench/results/ page")
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue  # a URL or an anchor on the same page
                resolved = os.path.normpath(os.path.join(repo, os.path.dirname(path), target.split("#")[0]))
                if not os.path.exists(resolved):
                    findings.append(f"{path}:{number}: link to {target}, which does not exist")
    return findings


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    findings = check(repo)
    for line in findings:
        print(line)
    if findings:
        return 1
    print(f"ok: {sum(1 for _ in pages(repo))} pages, README.md within {README_MAX_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Makes pre_words/<name>.out: the words llama.cpp's pre-tokenizer makes of each
text of pre_tokenizers.inp, one name per rule. See README.md.

    python3 make_pre_tokenizer_words.py --llama-cpp <llama.cpp source> --llama-words <oracle binary>

The split patterns of each rule are read from llama.cpp's src/llama-vocab.cpp
(the regex_exprs of each LLAMA_VOCAB_PRE_TYPE_* case), not from ember, and the
oracle binary hands them to llama.cpp's own unicode_regex_split().
"""
import argparse
import re
import subprocess
import tempfile
from pathlib import Path

SEPARATOR = b"\n__ggml_vocab_test__\n"
RECORD = "\x1e"   # separates the patterns in the oracle's input


def unescape_cpp(body: str) -> str:
    """The value of a C++ string literal's body (the escapes llama-vocab.cpp uses)."""
    out, i = [], 0
    simple = {"\\": "\\", '"': '"', "'": "'", "r": "\r", "n": "\n", "t": "\t"}
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            if nxt not in simple:
                raise ValueError(f"escape \\{nxt} in {body!r}")
            out.append(simple[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def patterns_by_type(source: str) -> dict[str, list[str]]:
    """Pre-type enum name (or 'DEFAULT' for the default branch) -> patterns."""
    start = source.index("struct llm_tokenizer_bpe : llm_tokenizer {")
    block = source[start:source.index("std::vector<std::string> regex_exprs;", start)]
    result: dict[str, list[str]] = {}
    pending: list[str] = []
    for m in re.finditer(r"case LLAMA_VOCAB_PRE_TYPE_(\w+):|default:|regex_exprs = \{(.*?)\};", block, re.S):
        if m.group(0).startswith("case"):
            pending.append(m.group(1))
        elif m.group(0) == "default:":
            pending.append("DEFAULT")
        else:
            body = re.sub(r"//[^\n]*", "", m.group(2))
            literals = [unescape_cpp(x) for x in re.findall(r'"((?:[^"\\]|\\.)*)"', body)]
            for t in pending:
                result[t] = literals
            pending = []
    return result


def first_name_by_type(source: str) -> dict[str, str]:
    """Pre-type enum name -> the first tokenizer.ggml.pre name the loader maps to it."""
    start = source.index('tokenizer_pre == "default"')
    block = source[start:source.index("unknown pre-tokenizer type", start)]
    result: dict[str, str] = {}
    names: list[str] = []
    for m in re.finditer(r'tokenizer_pre == "([^"]+)"|pre_type = LLAMA_VOCAB_PRE_TYPE_(\w+);', block):
        if m.group(1):
            names.append(m.group(1))
        else:
            result.setdefault(m.group(2), names[0])
            names = []
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llama-cpp", type=Path, required=True)
    parser.add_argument("--llama-words", type=Path, required=True)
    parser.add_argument("--inp", type=Path, help="texts (default: pre_tokenizers.inp next to this script)")
    parser.add_argument("--out", type=Path, help="output folder (default: pre_words next to this script)")
    args = parser.parse_args()

    source = (args.llama_cpp / "src" / "llama-vocab.cpp").read_text(encoding="utf-8")
    patterns = patterns_by_type(source)
    names = first_name_by_type(source)
    here = Path(__file__).resolve().parent
    texts = (args.inp or here / "pre_tokenizers.inp").read_bytes().split(SEPARATOR)[:-1]
    out_dir = args.out or here / "pre_words"
    out_dir.mkdir(exist_ok=True)
    done: set[tuple[str, ...]] = set()
    with tempfile.TemporaryDirectory() as scratch:
        pattern_file, text_file = Path(scratch) / "patterns", Path(scratch) / "text"
        for pre_type, name in names.items():
            rule = tuple(patterns[pre_type if pre_type in patterns else "DEFAULT"])
            if rule in done:
                continue   # one name per distinct pattern list
            done.add(rule)
            pattern_file.write_text(RECORD.join(rule), encoding="utf-8")
            lines = []
            for text in texts:
                text_file.write_bytes(text)
                run = subprocess.run([str(args.llama_words), str(pattern_file), str(text_file)], check=True,
                                     capture_output=True)
                lines.append(run.stdout.decode().strip())
            (out_dir / f"{name}.out").write_text("\n".join(lines) + "\n")
            print(f"{name} ({pre_type}): {len(rule)} patterns, {len(lines)} texts")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Makes the per-name pre-tokenizer vectors in pre/, with llama.cpp as the
oracle: for every tokenizer.ggml.pre name llama.cpp's loader accepts (and for
a vocabulary without the key), the shared GPT-2 vocabulary with only that key
changed tokenizes the texts of pre_tokenizers.inp. See README.md.

    python3 make_pre_tokenizer_vectors.py --llama-cpp <llama.cpp source> \
        --llama-tokenize <llama-tokenize binary> --shared <shared> --work <scratch dir>

Writes pre_tokenizers.inp and pre/<name>.out (special-token parsing off, no
BOS) next to this script; the vocabularies go to --work only.
"""
import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import make_bpe_rule_vectors as base

# Every name of llama.cpp's loader (src/llama-vocab.cpp, llama_vocab::impl::load).
NAMES = [
    "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "deepseek-llm", "deepseek-coder",
    "deepseek-v3", "falcon", "mpt", "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat",
    "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "refact", "command-r", "qwen2",
    "deepseek-r1-qwen", "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "glm4", "chatglm-bpe", "viking",
    "jais", "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "chameleon", "minerva-7b",
    "megrez", "gpt-4o", "llama4", "superbpe", "trillion", "bailingmoe", "seed-coder",
]
NO_KEY = "no-pre-key"

# One name per rule, for the byte-pair vocabulary (names of one rule split alike;
# the flags that tell them apart are checked on the GPT-2 vocabulary).
PAIR_NAMES = [
    "default", "llama-bpe", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "starcoder", "gpt-2",
    "qwen2", "bloom", "viking", "tekken", "chameleon", "gpt-4o", "superbpe", "bailingmoe", "seed-coder",
]   # the key removed: llama.cpp's default rule, with a warning

# Texts aimed at the rules the shared texts do not reach: case runs (tekken,
# gpt-4o), sentinels and image tokens (chameleon), digit grouping (superbpe,
# deepseek-v3), ASCII symbols that \p{S} misses in llama.cpp ('~'), CJK
# and kana runs (deepseek), the bloom stop characters, odd whitespace.
EXTRA_TEXTS = [
    "HelloWorld XMLHttpRequest getHTTPResponseCode iPhone McDonald's camelCaseWord ALLCAPS \u01c4emal \u01c5ungla",
    "<sentinel:0> <sentinel:123>x IMGIMGABZ IMGIMGABCDEZ IMGIMGZ IMGIMGAAAAAZ    four  two\ttab",
    "1 22 333 4444 55555 666666 7777777 12345678901 \u0661\u0662\u0663\u0664\u0665 \u00b9\u00b2\u00b3 3,141,592.65",
    "tilde~ back`tick caret^ pipe| dollar$ plus+ <=> a~b ~~~ `code` #hash @at \\slash",
    "don't you'll \u2019s I\u2019m DON'T THEY'RE It\u2019s rock'n'roll 'tis",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u3072\u3089\u304c\u306a\u30fb\u30ab\u30bf\u30ab\u30ca"
    "\u6df7\u3058\u308a\u3002\u4e2d\u6587\u6807\u70b9\uff1a\u201c\u5f15\u53f7\u201d\uff08\u62ec\u53f7\uff09"
    "\u3010\u65b9\u62ec\u53f7\u3011\u2014\u2014\u7834\u6298\u53f7\u2026\u2026 \ud55c\uad6d\uc5b4 \ubb38\uc7a5"
    "\uc785\ub2c8\ub2e4!",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u00c0\u00c9\u00ce\u00d5\u00dc \u01c5 \u01c8 \u01cb "
    "\u01f2 \ufb01 \ufb02 \u216b \u217b \u210c \u210d \U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c"
    "\U0001d521\U0001d522 \uff26\uff35\uff2c\uff2c \uff57\uff49\uff44\uff54\uff48",
    "x = [1, 2, 3]; y = {'a': 1}; z = f(x) ** 2 // 3 % 4 >> 1 != 0 && y || !z;\n\treturn -1;\n}\n\n\n   \n",
    "f(a|b) stop. stop, stop! stop? stop\u2026 \u3002\u3002 \uff0c\u3001 \u0964 \u06d4 \u060c (paren) |pipe|",
    "a\u00a0b\u2009c\u202fd\u3000e\u0085f  \u00a0 g \u180e h \u200b i\u2028j",
    "   \n\n   trailing spaces   \n   ",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llama-cpp", type=Path, required=True)
    parser.add_argument("--llama-tokenize", type=Path, required=True)
    parser.add_argument("--shared", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="make these names only")
    parser.add_argument("--pair-vocab", action="store_true",
                        help="use the byte-pair vocabulary (see pair_vocab) and write pre_pairs/ instead of pre/")
    args = parser.parse_args()

    sys.path.insert(0, str(args.llama_cpp / "gguf-py"))
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        import types
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = object
        sys.modules["sentencepiece"] = stub
    import gguf  # noqa: E402

    here = Path(__file__).resolve().parent
    args.work.mkdir(parents=True, exist_ok=True)
    texts = [t.encode("utf-8") for t in base.TEXTS + EXTRA_TEXTS] + base.BYTE_TEXTS
    assert all(base.SEPARATOR not in t for t in texts)
    (here / "pre_tokenizers.inp").write_bytes(b"".join(t + base.SEPARATOR for t in texts))
    out_dir = here / ("pre_pairs" if args.pair_vocab else "pre")
    out_dir.mkdir(exist_ok=True)

    source = args.shared / "tokenizer" / "ggml-vocab-gpt-2.gguf"

    def one(name: str) -> str:
        scratch = args.work / name
        scratch.mkdir(parents=True, exist_ok=True)
        vocab = scratch / "vocab.gguf"
        # None removes the key (make_vocab copies every other key unchanged).
        pre = None if name == NO_KEY else name
        if args.pair_vocab:
            pair_vocab(gguf, pre, vocab)
        else:
            make_vocab_without_or_with(gguf, source, pre, vocab)
        lines = []
        for text in texts:
            ids = base.tokenize(args.llama_tokenize, vocab, text, scratch, parse_special=False)
            lines.append(" ".join(str(i) for i in ids))
        (out_dir / f"{name}.out").write_text("\n".join(lines) + "\n")
        return name

    with ThreadPoolExecutor(args.jobs) as pool:
        names = (PAIR_NAMES if args.pair_vocab else NAMES) + [NO_KEY]
        for name in pool.map(one, args.only or names):
            print(f"{name}: {len(texts)} texts")


def make_vocab_without_or_with(gguf, source: Path, pre, dest: Path) -> None:
    reader = gguf.GGUFReader(str(source))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dest), arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        main_type = field.types[0]
        sub_type = field.types[-1] if main_type == gguf.GGUFValueType.ARRAY else None
        if name == "tokenizer.ggml.pre":
            if pre is None:
                continue
            value = pre
        writer.add_key_value(name, value, main_type, sub_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


def byte_chars() -> list[str]:
    """GPT-2's byte-to-character map, in byte order."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = [], 0x100
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(extra))
            extra += 1
    return chars


def pair_vocab(gguf, pre, dest: Path) -> None:
    """A byte-level BPE vocabulary in which every pair of bytes merges: tokens
    0..255 are the byte characters, token 256 + 256 * a + b is the pair (a, b),
    with merge rank 256 * a + b. Any two bytes of one word can merge, so the
    ids show where the pre-tokenizer cut the text."""
    chars = byte_chars()
    tokens = list(chars) + [chars[a] + chars[b] for a in range(256) for b in range(256)]
    merges = [f"{chars[a]} {chars[b]}" for a in range(256) for b in range(256)]
    writer = gguf.GGUFWriter(str(dest), "gpt2")
    writer.add_tokenizer_model("gpt2")
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    writer.add_token_merges(merges)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


if __name__ == "__main__":
    main()

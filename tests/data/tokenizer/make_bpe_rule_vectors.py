#!/usr/bin/env python3
"""Makes the Llama-3 ("llama-bpe") and Qwen2 ("qwen2") pre-tokenizer vectors in
this folder, with llama.cpp as the oracle. See README.md for the exact steps.

    PYTHONPATH=<llama.cpp>/gguf-py python3 make_bpe_rule_vectors.py \
        --llama-cpp <llama.cpp> --shared <shared> --work <scratch dir>

Writes bpe_rules.inp and <pre>.special_{off,on}.out next to this script; the
modified vocabularies go to --work only (tests rebuild them with gguf::Writer).
"""
import argparse
import subprocess
import sys
from pathlib import Path

SEPARATOR = b"\n__ggml_vocab_test__\n"

TEXTS = [
    "Hello world",
    " Hello world",
    "I'm sure you'll agree they've done it, 'cause it's what we'd DO.",
    "IT'S THAT'LL WE'VE YOU'RE I'D I'M DON'T It'S wE'Ll",
    "He said 'hello' and 're 've 's ''quoted'' '' ' ' 'tis",
    "1 12 123 1234 12345 123456 1234567 1234567890123",
    "3.14159 -42 +7 1,000,000 1e10 0x1F 2024-06-10 12:30:45 v1.2.3",
    "\uff26\uff55\uff4c\uff4c \uff11\uff12\uff13\uff14 \u0660\u0661\u0662\u0663\u0664 \u00b2\u00b3 \u00bd \u216b\u216c x\u00b2y",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
    "\u79c1\u306f\u6771\u4eac\u306b\u4f4f\u3093\u3067\u3044\u307e\u3059\u3002\u30ab\u30bf\u30ab\u30ca \uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
    "I love \U0001F355 and \U0001F431!! \U0001F600\U0001F602\U0001F923 "
    "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 \U0001F3F3\uFE0F\u200D\U0001F308 \U0001F44D\U0001F3FD",
    "a  b   c    d\t\te\t \tf      g",
    "line1\nline2\n\nline3\r\nline4\r\n\r\n  indented\n\t\ttabbed\n",
    "   leading and trailing   ",
    "\n\n\n",
    "  \n  \n  x \n\t\n",
    "Wait... what?!?! (really) [yes] {no} <tag> --- *** ### $$$ %%% @@@",
    "...\n\n---\n!!\r\n",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m fa\u00e7ade \u00fcber Stra\u00dfe \u0153uvre "
    "\u00bfQu\u00e9 tal? \u0141\u00f3d\u017a \u010cesk\u00fd",
    "Cafe\u0301 nai\u0308ve A\u030angstro\u0308m \u0915\u093f \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 "
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd "
    "\u0928\u092e\u0938\u094d\u0924\u0947",
    "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n",
    "https://example.com/path?q=1&x=2#frag foo.bar@example.org C:\\Users\\me",
    "<|endoftext|> special in text<|endoftext|>and<|endoftext|>\n<|endoftext|>",
    "bell\x07 esc\x1b[0m del\x7f zw\u200bsp nb\u00a0sp ideo\u3000graphic",
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "abc123def4567ghi 12ab 9.99% A1B2C3 \u2163rd",
    "sep\u2028line\u2029para\u0085nel\u000bvt\u000cff",
    "\u2211_{i=1}^{n} x_i \u2264 \u221e, \u222b f(x) dx \u2260 \u221a2 \u00b1 \u03c0 \u2248 3.14 \u2192 "
    "\u00a9 \u00ae \u2122 \u20ac100 \u00a35 \u00a5300",
    "\ue000 private \U0010FFFD plane16 \u0378 unassigned \U0001FAE8 \U00031350",
    "\t\tHello \tHello\t Hello\n Hello",
    " ",
    "",
]

# Raw bytes, not valid UTF-8: llama.cpp reads each bad byte as U+FFFD.
BYTE_TEXTS = [
    b"bad \xff\xfe bytes \xc3 end \xe2\x82 cut \xed\xa0\x80 surrogate \xc0\x80 overlong",
]

VARIANTS = ["llama-bpe", "qwen2"]


def make_vocab(reader_module, source: Path, pre: str, dest: Path) -> None:
    gguf = reader_module
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
            value = pre
        writer.add_key_value(name, value, main_type, sub_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


def tokenize(binary: Path, vocab: Path, text: bytes, scratch: Path, parse_special: bool) -> list[int]:
    prompt = scratch / "prompt.txt"
    prompt.write_bytes(text)
    cmd = [str(binary), "-m", str(vocab), "-f", str(prompt), "--ids", "--no-bos", "--no-escape", "--log-disable"]
    if not parse_special:
        cmd.append("--no-parse-special")
    out = subprocess.run(cmd, check=True, capture_output=True).stdout.decode().strip().splitlines()[-1]
    return [int(x) for x in out.strip("[]").split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llama-cpp", type=Path, required=True)
    parser.add_argument("--shared", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()

    sys.path.insert(0, str(args.llama_cpp / "gguf-py"))
    try:
        import sentencepiece  # noqa: F401  (gguf-py imports it; only its vocab converters use it)
    except ImportError:
        import types
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = object
        sys.modules["sentencepiece"] = stub
    import gguf  # noqa: E402

    here = Path(__file__).resolve().parent
    args.work.mkdir(parents=True, exist_ok=True)
    texts = [t.encode("utf-8") for t in TEXTS] + BYTE_TEXTS
    assert all(SEPARATOR not in t for t in texts)
    (here / "bpe_rules.inp").write_bytes(b"".join(t + SEPARATOR for t in texts))

    binary = args.llama_cpp / "build" / "bin" / "llama-tokenize"
    source = args.shared / "tokenizer" / "ggml-vocab-gpt-2.gguf"
    for pre in VARIANTS:
        vocab = args.work / f"ggml-vocab-{pre}-from-gpt-2.gguf"
        make_vocab(gguf, source, pre, vocab)
        for parse_special, suffix in ((False, "special_off"), (True, "special_on")):
            lines = []
            for text in texts:
                ids = tokenize(binary, vocab, text, args.work, parse_special)
                lines.append(" ".join(str(i) for i in ids))
            (here / f"{pre}.{suffix}.out").write_text("\n".join(lines) + "\n")
            print(f"{pre} {suffix}: {len(lines)} texts")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the tiny Hugging Face checkpoints of tests/convert (see README.md here).

Needs torch, safetensors, sentencepiece and tokenizers (pip). The weights are
random (fixed seed); the SentencePiece vocabulary is trained on docs/*.md. Run from the
repository root:  python3 tests/data/hf/make_fixtures.py tests/data/hf
"""
import glob
import json
import os
import sys
import tempfile

import sentencepiece as spm
import torch
from safetensors.torch import save_file

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/hf"
only = set(sys.argv[2:])   # fixture names to make (default: all); later ones copy earlier tokenizers


def want(name):
    return not only or name in only


def train_spm(path_prefix):
    text = "\n".join(open(p, encoding="utf-8").read() for p in sorted(glob.glob("docs/*.md")))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        corpus = f.name
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=path_prefix, vocab_size=420, model_type="bpe", byte_fallback=True,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
        control_symbols=["<mask>"], num_threads=1, add_dummy_prefix=False, split_digits=True,
        normalization_rule_name="identity",
        character_coverage=1.0, max_sentence_length=100000, minloglevel=2)
    os.remove(corpus)


def write_tokenizer(d, template, added, config):
    """tokenizer.json (only what the converters read: added_tokens; a real one also holds the
    vocabulary) and tokenizer_config.json with added_tokens_decoder, written by hand:
    `added` is a list of (id, content, special)."""
    entries = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": sp} for i, c, sp in added]
    json.dump({"version": "1.0", "added_tokens": entries, "model": {"type": "BPE", "vocab": {}, "merges": []}},
              open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8"), indent=2, ensure_ascii=False)
    cfg = {"added_tokens_decoder": {str(e["id"]): {k: v for k, v in e.items() if k != "id"} for e in entries}}
    cfg.update(config)
    cfg["chat_template"] = template
    json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8"), indent=2,
              ensure_ascii=False)


def rnd(*shape, dtype):
    return (torch.randn(*shape) * 0.05).to(dtype)


if want("gemma3"):
    torch.manual_seed(1234)
    # Gemma 3: BF16 weights, tied embeddings, a config vocabulary 3 larger than the tokenizer's
    # (padding rows), text_config nesting as in Gemma3ForConditionalGeneration checkpoints.
    g = os.path.join(out, "gemma3")
    os.makedirs(g, exist_ok=True)
    train_spm(os.path.join(g, "tokenizer"))
    n_vocab = spm.SentencePieceProcessor(model_file=os.path.join(g, "tokenizer.model")).vocab_size() + 3
    hidden, ff, layers, heads, kv, hd = 64, 96, 2, 4, 1, 16
    config = {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": hidden,
        "intermediate_size": ff, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": hd, "vocab_size": n_vocab, "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 32,
        "query_pre_attn_scalar": hd, "rope_scaling": None, "bos_token_id": 2, "eos_token_id": [1, 106],
        "pad_token_id": 0, "torch_dtype": "bfloat16", "tie_word_embeddings": True,
    }
    json.dump(config, open(os.path.join(g, "config.json"), "w"), indent=2)
    t = {"model.embed_tokens.weight": rnd(n_vocab, hidden, dtype=torch.bfloat16),
         "model.norm.weight": rnd(hidden, dtype=torch.bfloat16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = rnd(hidden, dtype=torch.bfloat16)
        t[p + "post_attention_layernorm.weight"] = rnd(hidden, dtype=torch.bfloat16)
        t[p + "pre_feedforward_layernorm.weight"] = rnd(hidden, dtype=torch.bfloat16)
        t[p + "post_feedforward_layernorm.weight"] = rnd(hidden, dtype=torch.bfloat16)
        t[p + "self_attn.q_proj.weight"] = rnd(heads * hd, hidden, dtype=torch.bfloat16)
        t[p + "self_attn.k_proj.weight"] = rnd(kv * hd, hidden, dtype=torch.bfloat16)
        t[p + "self_attn.v_proj.weight"] = rnd(kv * hd, hidden, dtype=torch.bfloat16)
        t[p + "self_attn.o_proj.weight"] = rnd(hidden, heads * hd, dtype=torch.bfloat16)
        t[p + "self_attn.q_norm.weight"] = rnd(hd, dtype=torch.bfloat16)
        t[p + "self_attn.k_norm.weight"] = rnd(hd, dtype=torch.bfloat16)
        t[p + "mlp.gate_proj.weight"] = rnd(ff, hidden, dtype=torch.bfloat16)
        t[p + "mlp.up_proj.weight"] = rnd(ff, hidden, dtype=torch.bfloat16)
        t[p + "mlp.down_proj.weight"] = rnd(hidden, ff, dtype=torch.bfloat16)
    save_file(t, os.path.join(g, "model.safetensors"), metadata={"format": "pt"})
    write_tokenizer(g, "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}"
                    "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
                    [(0, "<pad>", True), (1, "<eos>", True), (2, "<bos>", True), (3, "<unk>", True), (4, "<mask>", True),
                     (5, "<start_of_turn>", True), (6, "<end_of_turn>", True), (n_vocab - 1, "<extra\u2581tok>", False)],
                    {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>", "eos_token": "<eos>",
                     "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": {"content": "<mask>"},
                     "tokenizer_class": "GemmaTokenizer"})

if want("llama"):
    torch.manual_seed(1235)
    # Llama: F16 and F32 weights in two shards with an index, grouped-query attention (the
    # converter permutes q and k), an untied output, Llama 3 rope scaling (rope_freqs).
    l = os.path.join(out, "llama")
    os.makedirs(l, exist_ok=True)
    train_spm(os.path.join(l, "tokenizer"))
    n_vocab = spm.SentencePieceProcessor(model_file=os.path.join(l, "tokenizer.model")).vocab_size()
    hidden, ff, layers, heads, kv = 64, 128, 2, 4, 2
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": ff, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "vocab_size": n_vocab, "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "bos_token_id": 2, "eos_token_id": 1,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 256},
        "torch_dtype": "float16", "tie_word_embeddings": False,
    }
    json.dump(config, open(os.path.join(l, "config.json"), "w"), indent=2)
    shards = [{}, {}]
    shards[0]["model.embed_tokens.weight"] = rnd(n_vocab, hidden, dtype=torch.float16)
    shards[1]["lm_head.weight"] = rnd(n_vocab, hidden, dtype=torch.float32)
    shards[1]["model.norm.weight"] = 1 + rnd(hidden, dtype=torch.float16)
    for i in range(layers):
        s = shards[i % 2]
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = 1 + rnd(hidden, dtype=torch.float16)
        s[p + "post_attention_layernorm.weight"] = 1 + rnd(hidden, dtype=torch.float16)
        s[p + "self_attn.q_proj.weight"] = rnd(hidden, hidden, dtype=torch.float16)
        s[p + "self_attn.k_proj.weight"] = rnd(kv * hidden // heads, hidden, dtype=torch.float16)
        s[p + "self_attn.v_proj.weight"] = rnd(kv * hidden // heads, hidden, dtype=torch.float16)
        s[p + "self_attn.o_proj.weight"] = rnd(hidden, hidden, dtype=torch.float16)
        s[p + "self_attn.rotary_emb.inv_freq"] = rnd(hidden // heads // 2, dtype=torch.float32)
        s[p + "mlp.gate_proj.weight"] = rnd(ff, hidden, dtype=torch.float16)
        s[p + "mlp.up_proj.weight"] = rnd(ff, hidden, dtype=torch.float16)
        s[p + "mlp.down_proj.weight"] = rnd(hidden, ff, dtype=torch.float16)
    index = {"metadata": {}, "weight_map": {}}
    for k, s in enumerate(shards):
        name = f"model-{k + 1:05d}-of-00002.safetensors"
        save_file(s, os.path.join(l, name), metadata={"format": "pt"})
        index["weight_map"].update({n: name for n in s})
    json.dump(index, open(os.path.join(l, "model.safetensors.index.json"), "w"), indent=2)
    write_tokenizer(l, "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}",
                    [(0, "<pad>", True), (1, "</s>", True), (2, "<s>", True), (3, "<unk>", True)],
                    {"add_prefix_space": True, "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
                     "eos_token": "</s>", "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"})

# Qwen 2 and Qwen 3: a byte-level BPE tokenizer.json (no tokenizer.model) with Qwen 2's
# split, trained here with Hugging Face tokenizers; Qwen 2 with q/k/v biases, tied F16
# embeddings and 5 padding ids; Qwen 3 with per-head q/k norms, a head_dim unlike
# hidden / heads, BF16 and an untied output, and no rope_theta / max_position_embeddings
# in config.json (transformers' defaults then apply).
from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
TEXTS = ["Hello world, it's 2026!", "  two spaces\nand a newline\n\n", "ember's KV cache: 1234 tokens", "x=y+1;"]


def write_bpe(d):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], show_progress=False)
    tok.train(sorted(glob.glob("docs/*.md")), trainer)
    tok.add_tokens(["<tool call>"])   # an added token that is not special
    tok.save(os.path.join(d, "tokenizer.json"))
    n = tok.get_vocab_size()
    special = {"content": "", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
               "special": True}
    decoder = {str(tok.token_to_id(t)): dict(special, content=t) for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}
    decoder[str(tok.token_to_id("<tool call>"))] = dict(special, content="<tool call>", special=False)
    json.dump({"add_prefix_space": False, "added_tokens_decoder": decoder, "bos_token": None,
               "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
               "tokenizer_class": "Qwen2Tokenizer", "split_special_tokens": False,
               "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"},
              open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8"), indent=2)
    json.dump({text: tok.encode(text).ids for text in TEXTS}, open(os.path.join(d, "token_ids.json"), "w"), indent=1)
    return n, tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")


if want("qwen2"):
    torch.manual_seed(1236)
    q = os.path.join(out, "qwen2")
    os.makedirs(q, exist_ok=True)
    n_tok, eot, im_end = write_bpe(q)
    n_vocab = n_tok + 5
    hidden, ff, layers, heads, kv = 64, 128, 2, 4, 2
    hd = hidden // heads
    json.dump({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": hidden,
               "intermediate_size": ff, "num_hidden_layers": layers, "num_attention_heads": heads,
               "num_key_value_heads": kv, "vocab_size": n_vocab, "max_position_embeddings": 4096,
               "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "bos_token_id": eot, "eos_token_id": im_end,
               "sliding_window": 4096, "use_sliding_window": False, "tie_word_embeddings": True,
               "torch_dtype": "float16"}, open(os.path.join(q, "config.json"), "w"), indent=2)
    t = {"model.embed_tokens.weight": rnd(n_vocab, hidden, dtype=torch.float16),
         "model.norm.weight": 1 + rnd(hidden, dtype=torch.float16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + rnd(hidden, dtype=torch.float16)
        t[p + "post_attention_layernorm.weight"] = 1 + rnd(hidden, dtype=torch.float16)
        for proj, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
            t[p + f"self_attn.{proj}_proj.weight"] = rnd(rows, hidden, dtype=torch.float16)
            t[p + f"self_attn.{proj}_proj.bias"] = rnd(rows, dtype=torch.float16)
        t[p + "self_attn.o_proj.weight"] = rnd(hidden, heads * hd, dtype=torch.float16)
        t[p + "mlp.gate_proj.weight"] = rnd(ff, hidden, dtype=torch.float16)
        t[p + "mlp.up_proj.weight"] = rnd(ff, hidden, dtype=torch.float16)
        t[p + "mlp.down_proj.weight"] = rnd(hidden, ff, dtype=torch.float16)
    save_file(t, os.path.join(q, "model.safetensors"), metadata={"format": "pt"})

if want("qwen3"):
    torch.manual_seed(1237)
    q3 = os.path.join(out, "qwen3")
    os.makedirs(q3, exist_ok=True)
    n_tok, eot, im_end = write_bpe(q3)
    hd = 32
    json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden,
               "intermediate_size": ff, "num_hidden_layers": layers, "num_attention_heads": heads,
               "num_key_value_heads": kv, "head_dim": hd, "vocab_size": n_tok, "rms_norm_eps": 1e-06,
               "bos_token_id": eot, "eos_token_id": im_end, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
              open(os.path.join(q3, "config.json"), "w"), indent=2)
    t = {"model.embed_tokens.weight": rnd(n_tok, hidden, dtype=torch.bfloat16),
         "lm_head.weight": rnd(n_tok, hidden, dtype=torch.bfloat16),
         "model.norm.weight": 1 + rnd(hidden, dtype=torch.bfloat16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + rnd(hidden, dtype=torch.bfloat16)
        t[p + "post_attention_layernorm.weight"] = 1 + rnd(hidden, dtype=torch.bfloat16)
        t[p + "self_attn.q_proj.weight"] = rnd(heads * hd, hidden, dtype=torch.bfloat16)
        t[p + "self_attn.k_proj.weight"] = rnd(kv * hd, hidden, dtype=torch.bfloat16)
        t[p + "self_attn.v_proj.weight"] = rnd(kv * hd, hidden, dtype=torch.bfloat16)
        t[p + "self_attn.o_proj.weight"] = rnd(hidden, heads * hd, dtype=torch.bfloat16)
        t[p + "self_attn.q_norm.weight"] = 1 + rnd(hd, dtype=torch.bfloat16)
        t[p + "self_attn.k_norm.weight"] = 1 + rnd(hd, dtype=torch.bfloat16)
        t[p + "mlp.gate_proj.weight"] = rnd(ff, hidden, dtype=torch.bfloat16)
        t[p + "mlp.up_proj.weight"] = rnd(ff, hidden, dtype=torch.bfloat16)
        t[p + "mlp.down_proj.weight"] = rnd(hidden, ff, dtype=torch.bfloat16)
    save_file(t, os.path.join(q3, "model.safetensors"), metadata={"format": "pt"})

# Gemma 2, Granite, OLMo 2 and Qwen 3 MoE: smaller (hidden 32), reusing the tokenizer files
# above (Gemma 2 Gemma 3's SentencePiece model, Granite Llama's, OLMo 2 and Qwen 3 MoE the
# Qwen BPE). Gemma 2: soft-caps, an lm_head the converter skips. Granite: multipliers,
# permuted q/k. OLMo 2: post-norms only, whole-row q/k norms. Qwen 3 MoE: 4 experts of
# which 2 are used, a router, q/k norms.
import shutil  # noqa: E402


def copy_tokenizer(src, dst):
    for f in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "token_ids.json"):
        if os.path.exists(os.path.join(out, src, f)):
            shutil.copy(os.path.join(out, src, f), os.path.join(dst, f))
    cfg = json.load(open(os.path.join(out, src, "config.json")))
    return cfg["vocab_size"]


def layer_weights(t, p, hidden, ff, heads, kv, hd, dtype, norms, qk_norm=False, mlp=True):
    for n in norms:
        t[p + n + ".weight"] = 1 + rnd(hidden, dtype=dtype)
    t[p + "self_attn.q_proj.weight"] = rnd(heads * hd, hidden, dtype=dtype)
    t[p + "self_attn.k_proj.weight"] = rnd(kv * hd, hidden, dtype=dtype)
    t[p + "self_attn.v_proj.weight"] = rnd(kv * hd, hidden, dtype=dtype)
    t[p + "self_attn.o_proj.weight"] = rnd(hidden, heads * hd, dtype=dtype)
    if qk_norm == "row":
        t[p + "self_attn.q_norm.weight"] = 1 + rnd(heads * hd, dtype=dtype)
        t[p + "self_attn.k_norm.weight"] = 1 + rnd(kv * hd, dtype=dtype)
    elif qk_norm:
        t[p + "self_attn.q_norm.weight"] = 1 + rnd(hd, dtype=dtype)
        t[p + "self_attn.k_norm.weight"] = 1 + rnd(hd, dtype=dtype)
    if mlp:
        t[p + "mlp.gate_proj.weight"] = rnd(ff, hidden, dtype=dtype)
        t[p + "mlp.up_proj.weight"] = rnd(ff, hidden, dtype=dtype)
        t[p + "mlp.down_proj.weight"] = rnd(hidden, ff, dtype=dtype)


hidden, ff, heads, kv, hd = 32, 64, 2, 1, 16
if want("gemma2"):
    torch.manual_seed(1238)
    d = os.path.join(out, "gemma2")
    os.makedirs(d, exist_ok=True)
    n = copy_tokenizer("gemma3", d)
    json.dump({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": hidden,
               "intermediate_size": ff, "num_hidden_layers": 2, "num_attention_heads": heads,
               "num_key_value_heads": kv, "head_dim": hd, "vocab_size": n, "max_position_embeddings": 512,
               "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0, "sliding_window": 16, "query_pre_attn_scalar": hd,
               "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}, open(os.path.join(d, "config.json"), "w"),
              indent=2)
    t = {"model.embed_tokens.weight": rnd(n, hidden, dtype=torch.bfloat16),
         "lm_head.weight": rnd(n, hidden, dtype=torch.bfloat16), "model.norm.weight": rnd(hidden, dtype=torch.bfloat16)}
    for i in range(2):
        layer_weights(t, f"model.layers.{i}.", hidden, ff, heads, kv, hd, torch.bfloat16,
                      ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                       "post_feedforward_layernorm"])
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

if want("granite"):
    torch.manual_seed(1239)
    d = os.path.join(out, "granite")
    os.makedirs(d, exist_ok=True)
    n = copy_tokenizer("llama", d)
    json.dump({"architectures": ["GraniteForCausalLM"], "model_type": "granite", "hidden_size": hidden,
               "intermediate_size": ff, "num_hidden_layers": 2, "num_attention_heads": heads,
               "num_key_value_heads": kv, "vocab_size": n, "max_position_embeddings": 1024, "rms_norm_eps": 1e-05,
               "rope_theta": 10000.0, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
               "attention_multiplier": 0.0078125, "logits_scaling": 8.0, "bos_token_id": 2, "eos_token_id": 1,
               "tie_word_embeddings": True}, open(os.path.join(d, "config.json"), "w"), indent=2)
    t = {"model.embed_tokens.weight": rnd(n, hidden, dtype=torch.float16),
         "model.norm.weight": 1 + rnd(hidden, dtype=torch.float16)}
    for i in range(2):
        layer_weights(t, f"model.layers.{i}.", hidden, ff, heads, kv, hd, torch.float16,
                      ["input_layernorm", "post_attention_layernorm"])
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

if want("olmo2"):
    torch.manual_seed(1240)
    d = os.path.join(out, "olmo2")
    os.makedirs(d, exist_ok=True)
    n = copy_tokenizer("qwen3", d)
    json.dump({"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": hidden,
               "intermediate_size": ff, "num_hidden_layers": 2, "num_attention_heads": heads,
               "num_key_value_heads": heads, "vocab_size": n, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06,
               "rope_theta": 500000.0, "tie_word_embeddings": False}, open(os.path.join(d, "config.json"), "w"),
              indent=2)
    t = {"model.embed_tokens.weight": rnd(n, hidden, dtype=torch.float32),
         "lm_head.weight": rnd(n, hidden, dtype=torch.float32), "model.norm.weight": 1 + rnd(hidden, dtype=torch.float32)}
    for i in range(2):
        layer_weights(t, f"model.layers.{i}.", hidden, ff, heads, heads, hd, torch.float32,
                      ["post_attention_layernorm", "post_feedforward_layernorm"], qk_norm="row")
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

if want("qwen3moe"):
    torch.manual_seed(1241)
    d = os.path.join(out, "qwen3moe")
    os.makedirs(d, exist_ok=True)
    n = copy_tokenizer("qwen3", d)
    experts, moe_ff = 4, 48
    json.dump({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": hidden,
               "intermediate_size": ff, "moe_intermediate_size": moe_ff, "num_experts": experts,
               "num_experts_per_tok": 2, "norm_topk_prob": True, "num_hidden_layers": 2, "num_attention_heads": heads,
               "num_key_value_heads": kv, "head_dim": hd, "vocab_size": n, "max_position_embeddings": 4096,
               "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": False},
              open(os.path.join(d, "config.json"), "w"), indent=2)
    t = {"model.embed_tokens.weight": rnd(n, hidden, dtype=torch.bfloat16),
         "lm_head.weight": rnd(n, hidden, dtype=torch.bfloat16), "model.norm.weight": 1 + rnd(hidden, dtype=torch.bfloat16)}
    for i in range(2):
        p = f"model.layers.{i}."
        layer_weights(t, p, hidden, ff, heads, kv, hd, torch.bfloat16, ["input_layernorm", "post_attention_layernorm"],
                      qk_norm=True, mlp=False)
        t[p + "mlp.gate.weight"] = rnd(experts, hidden, dtype=torch.bfloat16)
        for e in range(experts):
            t[p + f"mlp.experts.{e}.gate_proj.weight"] = rnd(moe_ff, hidden, dtype=torch.bfloat16)
            t[p + f"mlp.experts.{e}.up_proj.weight"] = rnd(moe_ff, hidden, dtype=torch.bfloat16)
            t[p + f"mlp.experts.{e}.down_proj.weight"] = rnd(hidden, moe_ff, dtype=torch.bfloat16)
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

# Phi-3: fused qkv and gate_up projections, Llama's SentencePiece model with four added
# tokens past it (Phi-3's own rules for them), LongRoPE factors.
if want("phi3"):
    torch.manual_seed(1242)
    d = os.path.join(out, "phi3")
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(out, "llama", "tokenizer.model"), os.path.join(d, "tokenizer.model"))
    n_sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model")).vocab_size()
    added = [(n_sp, "<|endoftext|>", True), (n_sp + 1, "<|user|>", True), (n_sp + 2, "<|end|>", True),
             (n_sp + 3, "<|placeholder1|>", False)]
    write_tokenizer(d, "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}",
                    [(0, "<pad>", True), (1, "</s>", True), (2, "<s>", True), (3, "<unk>", False)] + added,
                    {"add_bos_token": False, "add_eos_token": False, "bos_token": "<s>", "eos_token": "<|endoftext|>",
                     "pad_token": "<|endoftext|>", "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"})
    n = n_sp + len(added)
    json.dump({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": hidden,
               "intermediate_size": ff, "num_hidden_layers": 2, "num_attention_heads": heads,
               "num_key_value_heads": heads, "vocab_size": n, "max_position_embeddings": 2048,
               "original_max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
               "rope_scaling": {"type": "longrope", "long_factor": [1.0 + 0.5 * k for k in range(hd // 2)],
                                "short_factor": [1.0 + 0.05 * k for k in range(hd // 2)]},
               "sliding_window": 262144, "bos_token_id": 1, "eos_token_id": n_sp, "tie_word_embeddings": False},
              open(os.path.join(d, "config.json"), "w"), indent=2)
    t = {"model.embed_tokens.weight": rnd(n, hidden, dtype=torch.float16),
         "lm_head.weight": rnd(n, hidden, dtype=torch.float16), "model.norm.weight": 1 + rnd(hidden, dtype=torch.float16)}
    for i in range(2):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + rnd(hidden, dtype=torch.float16)
        t[p + "post_attention_layernorm.weight"] = 1 + rnd(hidden, dtype=torch.float16)
        t[p + "self_attn.qkv_proj.weight"] = rnd(3 * heads * hd, hidden, dtype=torch.float16)
        t[p + "self_attn.o_proj.weight"] = rnd(hidden, heads * hd, dtype=torch.float16)
        t[p + "mlp.gate_up_proj.weight"] = rnd(2 * ff, hidden, dtype=torch.float16)
        t[p + "mlp.down_proj.weight"] = rnd(hidden, ff, dtype=torch.float16)
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

for extra in glob.glob(os.path.join(out, "*", "tokenizer.vocab")):
    os.remove(extra)
print("wrote", out)

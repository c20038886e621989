#!/usr/bin/env python3
"""A Python host of ember's C API through ctypes (no dependency beyond the standard
library): proves the shared library's ABI is usable from another language.
    ctypes_host.py LIBEMBER.so MODEL.gguf
Loads the model, tokenizes, streams 8 greedy tokens through a callback with their
ids and log-probabilities, and checks the result against the callback and against
detokenize. Exits non-zero on any mismatch."""
import ctypes as C
import math
import sys

lib = C.CDLL(sys.argv[1])
model_path = sys.argv[2].encode()

lib.ember_version.restype = C.c_char_p
lib.ember_last_error.restype = C.c_char_p
lib.ember_c_api_version.restype = C.c_int32


class SamplerOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("temperature", C.c_float), ("top_k", C.c_int32),
                ("top_p", C.c_float), ("min_p", C.c_float), ("repetition_penalty", C.c_float),
                ("frequency_penalty", C.c_float), ("presence_penalty", C.c_float),
                ("penalty_last_n", C.c_int32), ("seed", C.c_uint64), ("logit_bias", C.c_void_p),
                ("n_logit_bias", C.c_size_t), ("banned_tokens", C.POINTER(C.c_int32)),
                ("n_banned_tokens", C.c_size_t)]


class GenerateOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("max_tokens", C.c_int32), ("stop_strings", C.c_void_p),
                ("n_stop_strings", C.c_size_t), ("stop_tokens", C.POINTER(C.c_int32)),
                ("n_stop_tokens", C.c_size_t), ("stop_at_end_of_generation", C.c_int32),
                ("add_bos", C.c_int32), ("parse_special", C.c_int32), ("logprobs", C.c_int32)]


class GenerateResult(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("stop_reason", C.c_int), ("text", C.c_char_p),
                ("text_length", C.c_size_t), ("tokens", C.POINTER(C.c_int32)), ("n_tokens", C.c_size_t),
                ("prompt_tokens", C.c_int32), ("prefill_seconds", C.c_double), ("decode_seconds", C.c_double),
                ("time_to_first_token", C.c_double)]


TOKEN_FN = C.CFUNCTYPE(C.c_int, C.c_int32, C.POINTER(C.c_char), C.c_size_t, C.c_float, C.c_void_p)

# The structs above stop where ember.h 1.0.0's first version of them stopped; the
# library has grown fields since (speculative options and counts). Passing these
# smaller sizes is what an old binary does: ember must fill and read only them.
def defaults(struct_type, init):
    value = struct_type()
    init(C.byref(value), C.sizeof(struct_type))
    assert value.struct_size == C.sizeof(struct_type)
    return value



def check(status, what):
    if status != 0:
        sys.exit(f"{what}: status {status}: {lib.ember_last_error().decode()}")


# A failing call reports a status and a message, and raises nothing across the ABI.
bad = C.c_void_p()
status = lib.ember_model_load(b"/nonexistent.gguf", None, C.byref(bad))
assert status == 2 and b"/nonexistent.gguf" in lib.ember_last_error(), (status, lib.ember_last_error())

model = C.c_void_p()
check(lib.ember_model_load(model_path, None, C.byref(model)), "load")
session = C.c_void_p()
check(lib.ember_session_create(model, None, C.byref(session)), "session")
options = defaults(SamplerOptions, lib.ember_sampler_options_init)
options.temperature = 0.0
sampler = C.c_void_p()
check(lib.ember_sampler_create(C.byref(options), C.byref(sampler)), "sampler")
generate = defaults(GenerateOptions, lib.ember_generate_options_init)
generate.max_tokens = 8
generate.stop_at_end_of_generation = 0
generate.logprobs = 1

seen = []


@TOKEN_FN
def on_token(token, text, length, logprob, user):
    seen.append((token, C.string_at(text, length), logprob))
    return 0


result = GenerateResult()
result.struct_size = C.sizeof(GenerateResult)
check(lib.ember_session_generate(session, b"The capital of France is", sampler, C.byref(generate), on_token, None,
                                 C.byref(result)), "generate")
tokens = [result.tokens[i] for i in range(result.n_tokens)]
streamed = [t for t, _, _ in seen if t >= 0]
text = C.string_at(result.text, result.text_length)
assert len(tokens) == 8, tokens
assert tokens == streamed, (tokens, streamed)
assert b"".join(piece for _, piece, _ in seen) == text, (seen, text)
assert all(lp <= 0.0 and not math.isnan(lp) for t, _, lp in seen if t >= 0), seen

# detokenize the ids: the same text.
needed = C.c_size_t()
ids = (C.c_int32 * len(tokens))(*tokens)
assert lib.ember_detokenize(model, ids, len(tokens), 0, None, 0, C.byref(needed)) == 9  # buffer too small
buffer = C.create_string_buffer(needed.value + 1)
check(lib.ember_detokenize(model, ids, len(tokens), 0, buffer, len(buffer), C.byref(needed)), "detokenize")
assert buffer.value == text, (buffer.value, text)

lib.ember_sampler_free(sampler)
lib.ember_session_free(session)
lib.ember_model_free(model)
print(f"python ctypes host: ember {lib.ember_version().decode()} (C API {lib.ember_c_api_version()}), "
      f"{len(tokens)} tokens: {text.decode()!r}")

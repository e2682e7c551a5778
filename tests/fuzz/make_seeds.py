#!/usr/bin/env python3
"""Writes the seed corpora in tests/fuzz/corpus/ (committed; rerun only to change them).

checkpoint/: small valid llama2.c checkpoints (v0, v1 and v2, shared and unshared classifier, MHA and
GQA) and near-misses (version 2 without a group size, a GGUF prefix). tokenizer/: fuzz_tokenizer inputs, i.e. a flags byte, a
text-length byte, the text, then a tokenizer.bin. gguf/: GGUF files with vocabularies (a tiny Llama model
with a SentencePiece vocabulary, a byte-level BPE vocabulary), beside the parser's own seeds.

The hash-named files beside these seeds are inputs libFuzzer found while fuzzing from them, kept after
`fuzz_TARGET -merge=1 NEW_DIR tests/fuzz/corpus/TARGET FOUND_DIR` reduced them to the ones that add
coverage; .ci/run replays and extends the whole corpus on every run.
"""
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def floats(rng, n):
    return struct.pack(f"<{n}f", *[rng.uniform(-1, 1) for _ in range(n)])


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def q80(blob, tensors, gs):
    """export.py's quantize_q80 of each of `tensors` equal tensors in `blob`: int8 values, then fp32 scales.
    A float32 division rounded from double is the float32 division; round() takes halves to even."""
    w = struct.unpack(f"<{len(blob) // 4}f", blob)
    n = len(w) // tensors
    out = b""
    for t in range(tensors):
        q, s = [], []
        for g in range(t * n, (t + 1) * n, gs):
            scale = f32(max(abs(x) for x in w[g:g + gs]) / 127.0)
            s.append(scale)
            q += [0 if scale == 0 else round(f32(x / scale)) for x in w[g:g + gs]]
        out += struct.pack(f"<{len(q)}b", *q) + struct.pack(f"<{len(s)}f", *s)
    return out


def checkpoint(dim, hidden, layers, heads, kv_heads, vocab, seq_len, version, shared, seed, gs=2):
    rng = random.Random(seed)
    head = dim // heads
    kv = head * kv_heads
    rms = lambda n: floats(rng, n)
    parts = {
        "emb": floats(rng, vocab * dim), "rms_att": rms(layers * dim), "wq": floats(rng, layers * dim * dim),
        "wk": floats(rng, layers * kv * dim), "wv": floats(rng, layers * kv * dim), "wo": floats(rng, layers * dim * dim),
        "rms_ffn": rms(layers * dim), "w1": floats(rng, layers * hidden * dim), "w2": floats(rng, layers * dim * hidden),
        "w3": floats(rng, layers * hidden * dim), "rms_final": rms(dim),
        "cls": b"" if shared else floats(rng, vocab * dim),
    }
    fields = [dim, hidden, layers, heads, kv_heads, vocab if (shared or version >= 1) else -vocab, seq_len]
    if version == 0:
        order = ["emb", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final"]
        body = b"".join(parts[k] for k in order) + bytes(4 * seq_len * head) + parts["cls"]
        return struct.pack("<7i", *fields) + body
    if version == 2:
        header = struct.pack("<Ii7iBi", 0x616B3432, 2, *fields, 1 if shared else 0, gs).ljust(256, b"\0")
        norms = b"".join(parts[k] for k in ["rms_att", "rms_ffn", "rms_final"])
        per_layer = ["wq", "wk", "wv", "wo", "w1", "w2", "w3"]
        matrices = q80(parts["emb"], 1, gs) + b"".join(q80(parts[k], layers, gs) for k in per_layer)
        return header + norms + matrices + (b"" if shared else q80(parts["cls"], 1, gs))
    header = struct.pack("<Ii7iB", 0x616B3432, 1, *fields, 1 if shared else 0).ljust(256, b"\0")
    order = ["rms_att", "rms_ffn", "rms_final", "emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3", "cls"]
    return header + b"".join(parts[k] for k in order)


def tokenizer(pieces):
    max_len = max([1] + [len(p) for p, _ in pieces])
    out = struct.pack("<i", max_len)
    for p, score in pieces:
        out += struct.pack("<fi", score, len(p)) + p
    return out


def byte_vocab():
    return [(b"<unk>", 0.0), (b"\n<s>\n", 0.0), (b"\n</s>\n", 0.0)] + [(b"<0x%02X>" % b, 0.0) for b in range(256)]


def fuzz_input(flags, text, tok):
    return bytes([flags, len(text)]) + text + tok


def write(sub, name, data):
    d = os.path.join(HERE, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


write("checkpoint", "v0-shared", checkpoint(4, 4, 1, 2, 1, 4, 4, 0, True, 1))
write("checkpoint", "v0-unshared", checkpoint(4, 6, 2, 2, 2, 5, 3, 0, False, 2))
write("checkpoint", "v1-shared", checkpoint(4, 4, 1, 2, 1, 4, 4, 1, True, 3))
write("checkpoint", "v1-unshared-gqa", checkpoint(8, 4, 1, 4, 2, 3, 2, 1, False, 4))
v2 = bytearray(checkpoint(4, 4, 1, 2, 1, 4, 4, 1, True, 5))
v2[4] = 2
write("checkpoint", "v1-version-2", bytes(v2))
write("checkpoint", "v2-shared", checkpoint(4, 4, 1, 2, 1, 4, 4, 2, True, 6, gs=4))
write("checkpoint", "v2-unshared-gqa", checkpoint(8, 4, 2, 4, 2, 3, 2, 2, False, 7, gs=2))
write("checkpoint", "gguf-prefix", b"GGUF\x03\x00\x00\x00" + bytes(40))

merges = [(b" ", 0.0), (b"H", 1.0), (b"e", 1.0), (b"l", 1.0), (b"o", 1.0), (b"w", 1.0), (b"r", 1.0), (b"d", 1.0),
          (b"ll", 5.0), (b"He", 4.0), (b"llo", 6.0), (b"Hello", 7.0), (b" w", 3.0), (b"or", 3.0), (b"ld", 3.0),
          (b" Hello", 8.0), (b"orld", 4.0), (b" world", 5.0)]
write("tokenizer", "hello-merges", fuzz_input(1, b"Hello world", tokenizer([(b"<unk>", 0.0), (b"<s>", 0.0), (b"</s>", 0.0)] + merges)))
write("tokenizer", "bytes-utf8", fuzz_input(3, "na\u00efve \u2603 \U0001F642 \xff\x80".encode("utf-8", "surrogateescape")[:60],
                                             tokenizer(byte_vocab() + merges + [("\u00ef".encode(), 2.0), (b"\xe2\x98", 1.0)])))
write("tokenizer", "duplicates-ties", fuzz_input(1, b"aaaa bb ab", tokenizer(byte_vocab() + [
    (b" ", 0.0), (b"a", 1.0), (b"a", 1.0), (b"aa", 2.0), (b"aa", 2.0), (b"b", 0.0), (b"ab", 2.0), (b"bb", -1e10), (b" a", 2.0)])))
write("tokenizer", "empty-text", fuzz_input(0, b"", tokenizer(byte_vocab()[:5])))
write("tokenizer", "odd-byte-pieces", fuzz_input(1, b"\x01 z", tokenizer(byte_vocab()[:3] + [(b"<0x 1>", 1.0), (b"<0x-1>", 1.0), (b"<0x0x>", 1.0), (b"<0x4", 0.0), (b" ", 0.0)] + byte_vocab()[7:])))

# gguf/: GGUF files with vocabularies (the parser's own seeds are beside them): a tiny Llama model with a
# SentencePiece vocabulary, and a vocabulary-only file with a byte-level BPE vocabulary and control tokens.
def gguf_string(b):
    return struct.pack("<Q", len(b)) + b


def gguf(metadata, tensors=()):
    """A GGUF v3 image: metadata (key, type number, encoded value), then f32 tensors (name, dims, floats)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        head += gguf_string(key.encode()) + struct.pack("<I", kind) + value
    data, offset = b"", 0
    for name, dims, values in tensors:
        head += gguf_string(name.encode()) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        head += struct.pack("<IQ", 0, offset)
        blob = struct.pack(f"<{len(values)}f", *values)
        blob += bytes(-len(blob) % 32)
        data += blob
        offset += len(blob)
    return head + bytes(-len(head) % 32) + data


def strings(values):
    return struct.pack("<IQ", 8, len(values)) + b"".join(gguf_string(v) for v in values)


def numbers(fmt, kind, values):
    return struct.pack("<IQ", kind, len(values)) + struct.pack(f"<{len(values)}{fmt}", *values)


def u32(v):
    return struct.pack("<I", v)


spm = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)] + \
      ["\u2581".encode(), b"H", b"e", b"l", b"o", "\u2581H".encode(), b"ll", b"He", b"llo", b"Hello"]
rng = random.Random(11)
dim, hidden, vocab = 4, 8, len(spm)
model = [("token_embd.weight", [dim, vocab], None), ("output_norm.weight", [dim], None)]
for name, dims in [("attn_norm", [dim]), ("attn_q", [dim, dim]), ("attn_k", [dim, 2]), ("attn_v", [dim, 2]),
                   ("attn_output", [dim, dim]), ("ffn_norm", [dim]), ("ffn_gate", [dim, hidden]),
                   ("ffn_down", [hidden, dim]), ("ffn_up", [dim, hidden])]:
    model.append((f"blk.0.{name}.weight", dims, None))
model = [(n, d, [rng.uniform(-1, 1) for _ in range(d[0] * (d[1] if len(d) > 1 else 1))]) for n, d, _ in model]
write("gguf", "llama-spm-model", gguf([
    ("general.architecture", 8, gguf_string(b"llama")), ("llama.embedding_length", 4, u32(dim)),
    ("llama.feed_forward_length", 4, u32(hidden)), ("llama.block_count", 4, u32(1)),
    ("llama.attention.head_count", 4, u32(2)), ("llama.attention.head_count_kv", 4, u32(1)),
    ("llama.context_length", 4, u32(8)), ("tokenizer.ggml.model", 8, gguf_string(b"llama")),
    ("tokenizer.ggml.tokens", 9, strings(spm)),
    ("tokenizer.ggml.scores", 9, numbers("f", 6, [0.0] * 259 + [float(i) for i in range(vocab - 259)])),
    ("tokenizer.ggml.token_type", 9, numbers("i", 5, [2, 3, 3] + [6] * 256 + [1] * (vocab - 259)))], model))
# GPT-2's byte mapping: printable bytes stand for themselves, the others for U+0100 onwards.
printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
mapped = {b: chr(b) for b in printable}
mapped.update({b: chr(256 + i) for i, b in enumerate(b for b in range(256) if b not in printable)})
bpe = [mapped[b].encode() for b in range(256)] + ["\u0120w".encode(), b"or", b"ld", b"He", b"ll", b"llo", b"Hello",
                                                   "\u0120wor".encode(), "\u0120world".encode()]
specials = [b"<|begin_of_text|>", b"<|eot_id|>"]
write("gguf", "bpe-vocabulary", gguf([
    ("general.architecture", 8, gguf_string(b"llama")), ("tokenizer.ggml.model", 8, gguf_string(b"gpt2")),
    ("tokenizer.ggml.pre", 8, gguf_string(b"llama-bpe")), ("tokenizer.ggml.tokens", 9, strings(bpe + specials)),
    ("tokenizer.ggml.token_type", 9, numbers("i", 5, [1] * len(bpe) + [3, 3])),
    ("tokenizer.ggml.merges", 9, strings(["\u0120 w".encode(), b"o r", b"l d", b"H e", b"l l", b"ll o", b"He llo",
                                          "\u0120w or".encode(), "\u0120wor ld".encode()])),
    ("tokenizer.ggml.bos_token_id", 4, u32(len(bpe))), ("tokenizer.ggml.eos_token_id", 4, u32(len(bpe) + 1))]))

# cli/: fuzz_cli inputs, the arguments after the program name separated by NUL bytes.
for name, args in {
    "generate-run-c": ["generate", "model.bin", "-z", "tok.bin", "-t", "0.8", "-p", "0.9", "-s", "42", "-n", "256",
                       "-i", "Once upon a time"],
    "generate-device": ["generate", "m.bin", "--backend", "opencl", "--device", "0.0", "--platform", "pocl",
                        "--layers-per-offload", "1", "--no-host-mirror", "--finalize=cpu", "--schedule", "per-op",
                        "--work-shape", "64x32", "--max-device-memory", "512", "--compare-cpu", "--tolerance", "1e-3", "-v"],
    "generate-octal": ["generate", "m.bin", "-n", "010", "-s", "0x10", "-t", "inf", "-t", "0", "--device", ""],
    "generate-cpu-device": ["generate", "m.bin", "--backend", "cpu", "--device", "0", "--compare-cpu"],
    "bench": ["bench", "--synthetic", "tiny", "-n", "8", "--context", "32", "--runs", "010", "--probe-mib", "64",
              "--profile", "--json"],
    "tokenize-dashed": ["tokenize", "tok.bin", "--", "-x"],
    "info": ["info", "m.bin"],
    "devices": ["devices"],
    "help": ["generate", "--help"],
    "version": ["--version"],
    "unknown": ["generat\n", "m.bin"],
}.items():
    write("cli", name, b"\0".join(a.encode() for a in args))

#!/usr/bin/env python3
"""Checks gdp's C tokenizer against Hugging Face's `tokenizers` (tests/cli/hf_tokenizer.sh runs it).

    python3 tests/hf_tokenizer_check.py GDP TMPDIR

1. Writes a corpus of varied text (over 1 MB: many scripts, combining marks, emoji, digits, contractions
   in both cases, runs of spaces, tabs, newlines and Unicode spaces, symbols, <|endoftext|>).
2. `tokenizers` trains a byte-level BPE with the GPT-2 pre-tokenizer and saves tokenizer.json; the same
   model is also saved with Llama-3's pre-tokenizer (Split regex + ByteLevel) and ignore_merges.
   For each, `gdp tokenize` must give exactly the ids of `Tokenizer.encode`, and decode back to the text.
3. Invalid UTF-8: gdp treats a byte that starts no valid sequence as one symbol character. HF takes only
   str, so the reference puts a private-use character (also a symbol) in its place for the
   pre-tokenizer, maps the pieces back to the raw bytes and runs HF's BPE model on each piece.
4. `gdp prepare --tokenizer bpe` writes tokenizer.json; HF loads it and must encode as gdp does.
Prints ok/FAIL lines; exits 1 on a failure, 3 when `tokenizers` is missing.
"""
import json
import os
import random
import subprocess
import sys

try:
    import tokenizers
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError:
    print("skipped: the Python package 'tokenizers' is missing (pip install tokenizers)")
    sys.exit(3)

GDP, TMP = sys.argv[1], sys.argv[2]
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
failed = False


def ok(msg):
    print("ok: " + msg)


def bad(msg):
    global failed
    failed = True
    print("FAIL: " + msg)


def corpus(n_bytes, seed):
    rng = random.Random(seed)
    words = ("the quick brown fox jumps over lazy dog dictionary defines word water river stone light "
             "Hello WORLD Naïve café résumé façade Ærø über straße").split()
    scripts = ["Ελληνικά γλώσσα λέξη", "Русский язык слово", "日本語の文章です", "中文汉字测试", "한국어 문장",
               "العربية كلمة", "हिन्दी भाषा शब्द", "עברית מילה", "ไทย ภาษา", "Tiếng Việt có dấu",
               "e\u0301 a\u0300 o\u0308 n\u0303", "😀 🎉 👍🏽 🧑‍💻", "ℕ ℝ ∑ ∫ √ ∞ ≤ ≥", "Ⅻ ½ ¾ ² ³ ٣ ४ ๕", "ﬁ ﬀ Ⅳ"]
    contractions = ["don't", "I'm", "they'll", "we've", "you're", "she'd", "it's", "IT'S", "DON'T", "O'Neil",
                    "'tis", "rock'n'roll", "can''t", "'S'"]
    spaces = [" ", "  ", "   ", "\t", " \t ", "\n", "\n\n", "\r\n", "\n \n", "\u00a0", "\u3000", "\u2003",
              "\u2009 ", "    \n", " \r\n\r\n ", "\x0b", "\x0c"]
    symbols = ["!", "?!", "...", "--", "—", "(", ")", "[x]", "{}", "<>", "#", "@user", "$5", "%", "&&", "||",
               "::", "->", "=>", "«»", "“quoted”", "'single'", "\"double\"", "`code`", "~", "^_^", "¿", "¡"]
    out, size = [], 0
    while size < n_bytes:
        r = rng.random()
        if r < 0.45:
            piece = rng.choice(words)
        elif r < 0.55:
            piece = rng.choice(scripts)
        elif r < 0.62:
            piece = rng.choice(contractions)
        elif r < 0.72:
            k = rng.choice([1, 2, 3, 4, 5, 7, 12])
            piece = "".join(rng.choice("0123456789") for _ in range(k))
            if rng.random() < 0.2:
                piece += rng.choice([".5", ",000", "%", "th", "x"])
        elif r < 0.82:
            piece = rng.choice(symbols)
        elif r < 0.999:
            piece = rng.choice(spaces)
        else:
            piece = "<|endoftext|>"
        sep = rng.choice([" ", " ", " ", "", "\n"]) if r < 0.82 else ""
        out.append(piece + sep)
        size += len((piece + sep).encode())
    return "".join(out)


def run(args, data):
    p = subprocess.run([GDP] + args, input=data, capture_output=True)
    if p.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(args), p.stderr.decode(errors="replace")))
    return p.stdout


def gdp_ids(tok_path, data):
    return [int(x) for x in run(["tokenize", "--tokenizer", tok_path], data).split()]


def compare(what, want, got, data_ids_text=None):
    if want == got:
        ok("%s: %d ids, the same" % (what, len(want)))
        return True
    i = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]), min(len(want), len(got)))
    bad("%s: %d ids from HF, %d from gdp; first difference at %d: HF %s, gdp %s" %
        (what, len(want), len(got), i, want[max(0, i - 3):i + 5], got[max(0, i - 3):i + 5]))
    return False


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


text = corpus(1_200_000, 7)
raw = text.encode()
with open(os.path.join(TMP, "corpus.txt"), "wb") as f:
    f.write(raw)
ok("corpus: %d bytes, %d characters" % (len(raw), len(text)))

tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train([os.path.join(TMP, "corpus.txt")], trainer)
gpt2_path = os.path.join(TMP, "gpt2_tokenizer.json")
tok.save(gpt2_path)
spec = json.load(open(gpt2_path))
spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
spec["model"]["ignore_merges"] = True
llama_path = os.path.join(TMP, "llama3_tokenizer.json")
json.dump(spec, open(llama_path, "w"), ensure_ascii=False)

for name, path in (("GPT-2 pre-tokenizer", gpt2_path), ("Llama-3 pre-tokenizer + ignore_merges", llama_path)):
    hf = Tokenizer.from_file(path)
    want = hf.encode(text).ids
    got = gdp_ids(path, raw)
    compare("tokenizers %s, %s on the corpus" % (tokenizers.__version__, name), want, got)
    back = run(["tokenize", "--tokenizer", path, "--decode"], " ".join(map(str, got)).encode())
    if back == raw:
        ok("%s: decode(encode(corpus)) is the corpus" % name)
    else:
        bad("%s: decode(encode(corpus)) differs from the corpus" % name)

# invalid UTF-8: lines of the corpus with stray bytes, truncated sequences, surrogates and overlongs
rng = random.Random(3)
lines = text.split("\n")[:3000]
stray = [b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf5\x80\x80\x80",
         b"\xf0\x9f\x98", b"\xbf\xbf"]
bad_lines = []
for ln in lines:
    b = ln.encode()
    for _ in range(rng.randint(0, 3)):
        k = rng.randint(0, len(b))
        while k < len(b) and (b[k] & 0xC0) == 0x80:  # insert between characters
            k += 1
        b = b[:k] + rng.choice(stray) + b[k:]
    bad_lines.append(b.replace(b"<|endoftext|>", b"<|x|>"))
bad_raw = b"\n".join(bad_lines)
placeholder = bad_raw.decode("utf-8", errors="surrogateescape")
placeholder = "".join(chr(0xE000 + ord(c) - 0xDC00) if 0xDC80 <= ord(c) <= 0xDCFF else c for c in placeholder)
b2u = bytes_to_unicode()
for name, path in (("GPT-2", gpt2_path), ("Llama-3", llama_path)):
    hf = Tokenizer.from_file(path)
    want = []
    for piece, (s, e) in hf.pre_tokenizer.pre_tokenize_str(placeholder):
        orig = b"".join(bytes([ord(c) - 0xE000]) if 0xE000 <= ord(c) < 0xE100 else c.encode() for c in placeholder[s:e])
        mapped = "".join(b2u[x] for x in orig)
        vocab_id = hf.model.token_to_id(mapped) if name == "Llama-3" else None
        want += [vocab_id] if vocab_id is not None else [t.id for t in hf.model.tokenize(mapped)]
    got = gdp_ids(path, bad_raw)
    compare("%s on %d bytes with invalid UTF-8 (HF pre-tokenizer and BPE model per piece)" % (name, len(bad_raw)),
            want, got)
    back = run(["tokenize", "--tokenizer", path, "--decode"], " ".join(map(str, got)).encode())
    if back == bad_raw:
        ok("%s: invalid UTF-8 round-trips" % name)
    else:
        bad("%s: invalid UTF-8 does not round-trip" % name)

# the other way: gdp's own BPE as tokenizer.json, loaded by HF
out_dir = os.path.join(TMP, "ours")
run(["prepare", "--input", os.path.join(TMP, "corpus.txt"), "--out", out_dir, "--vocab", "2000"], b"")
ours_json = os.path.join(out_dir, "tokenizer.json")
hf = Tokenizer.from_file(ours_json)
want = hf.encode(text).ids
compare("HF loads gdp prepare's tokenizer.json, encodes the corpus as gdp's tokenizer.bin",
        want, gdp_ids(os.path.join(out_dir, "tokenizer.bin"), raw))
compare("gdp reads its own tokenizer.json the same way", want, gdp_ids(ours_json, raw))
if hf.decode(want, skip_special_tokens=False) == text:
    ok("HF decodes gdp's tokenizer.json back to the corpus")
else:
    bad("HF's decode with gdp's tokenizer.json differs from the corpus")
sys.exit(1 if failed else 0)

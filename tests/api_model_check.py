#!/usr/bin/env python3
"""The Model class of scripts/gdp_ctypes.py (build/libgdpmodel.so) against `gdp generate`
(tests/cli/api.sh runs it).

    python3 tests/api_model_check.py GDP LIBGDPMODEL CHECKPOINT

1. Model.generate gives the continuation `gdp generate` prints, greedy and sampled (temperature,
   top-k, top-p, repetition penalty, seed).
2. A batch of prompts of different lengths, each ending on its own (max_tokens, a stop token), gives
   each prompt's continuation alone, and `gdp generate --prompts` gives the same lines.
3. Batch: logits are numpy arrays, an ended sequence has none, positions count the consumed tokens.
4. Mistakes raise RuntimeError with the library's message.
Prints ok/FAIL lines; exits 1 on a failure, 3 when numpy is missing.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("skipped: the Python package 'numpy' is missing (pip install numpy)")
    sys.exit(3)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import gdp_ctypes as gdp  # noqa: E402

GDP, LIB, CKPT = sys.argv[1:4]
failed = 0


def report(good, what):
    global failed
    failed += not good
    print(f"{'ok' if good else 'FAIL'}: Model {what}")


def flags(tokens, temperature=0.8, top_k=0, top_p=1.0, repetition_penalty=1.0, seed=1):
    return ["--tokens", str(tokens), "--temperature", str(temperature), "--top-k", str(top_k), "--top-p", str(top_p),
            "--repetition-penalty", str(repetition_penalty), "--seed", str(seed)]


def cli(args):
    return subprocess.run([GDP, "generate", "--checkpoint", CKPT] + args, check=True, capture_output=True).stdout


gdp.model_lib(LIB)
m = gdp.Model(CKPT)
report(m.vocab_size == 256 and m.device == "cpu", f"loads {CKPT}: vocabulary {m.vocab_size}, device {m.device}")
settings = [dict(temperature=0), dict(temperature=0.9, top_k=20, top_p=0.9, repetition_penalty=1.3, seed=7),
            dict(temperature=1.0, seed=11)]
for s in settings:
    got = m.generate("static int", max_tokens=30, **s)
    want = cli(["--prompt", "static int"] + flags(30, **s))
    report(b"static int" + got + b"\n" == want, f"generate {s} = gdp generate: {got!r}")

prompts = ["s", "Tensor *", "typedef struct Model {\n    ModelConfig cfg;", "static int"]
s = dict(temperature=0.9, top_k=40, top_p=0.95, repetition_penalty=1.2, seed=5)
stop = ord(" ")
batch = m.generate(prompts, max_tokens=25, stop_token=stop, **s)
alone = [m.generate(p, max_tokens=25, stop_token=stop, **s) for p in prompts]
report(batch == alone, f"a batch of {len(prompts)} prompts, each ending on its own, = each alone: {batch!r}")
with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
    f.write("".join(p.replace("\n", " ") + "\n" for p in prompts))
    f.flush()
    lines = cli(["--prompts", f.name, "--stop-token", str(stop)] + flags(25, **s)).decode().splitlines()
again = m.generate([p.replace("\n", " ") for p in prompts], max_tokens=25, stop_token=stop, **s)
report(lines == [a.decode().replace("\\", "\\\\").replace("\n", "\\n") for a in again],
       "gdp generate --prompts --stop-token prints the same lines")

with m.batch(2, temperature=0) as b:
    b.prefill([m.encode("ab"), m.encode("xyz")])
    lg = b.logits(1)
    nxt = b.sample()
    report(isinstance(lg, np.ndarray) and lg.shape == (256,) and nxt[1] == int(np.argmax(lg)),
           "greedy sample = argmax of the logits")
    live = b.step(np.array([-1, nxt[1]]))
    report(live == 1 and b.logits(0) is None and b.position(0) == 2 and b.position(1) == 4,
           "step: an ended sequence has no logits, positions count consumed tokens")
report(m.decode(m.encode("héllo")) == "héllo".encode(), "encode / decode round trip")

for what, call in [("a missing checkpoint", lambda: gdp.Model(CKPT + "/nothing")),
                   ("a token outside the vocabulary", lambda: m.batch(1).prefill([[999]])),
                   ("a bad top_p", lambda: m.batch(1, top_p=3))]:
    try:
        call()
        report(False, f"accepted {what}")
    except RuntimeError as e:
        report(True, f"refuses {what}: {e}")
m.close()
sys.exit(1 if failed else 0)

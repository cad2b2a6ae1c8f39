#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# gdp eval --dump-logits and scripts/export_hf.py (checkpoint -> Hugging Face folder), on the CPU.
# Without torch: the dump's logits give eval's loss; fla's format (householder language models) holds
# every checkpoint tensor unchanged under fla's names with a config.json that fla's
# GatedDeltaProductConfig reads; the self-contained format (split mode, classifiers, --self-contained)
# holds every tensor unchanged, with config.json's auto_map and modeling_gdp.py beside it; bad input
# gets clear errors. Needs python3 with h5py, numpy and safetensors, else it is skipped.
# With torch and transformers too (else that part is skipped, saying why): for each model variant,
# the folder loaded by transformers (trust_remote_code: scripts/hf/modeling_gdp.py) gives gdp's
# logits (scripts/check_hf_export.py, rel L2 <= 1e-4), and generate() gives gdp's greedy text.
# (fla itself runs fla's format on a GPU machine: tests/gpu/fla_export.sh.)
PY=${PYTHON:-python3}
if ! "$PY" -c 'import h5py, numpy, safetensors' 2>/dev/null; then
    echo "skipped: $PY lacks h5py, numpy or safetensors (pip install h5py numpy safetensors)"
    exit 0
fi
CLI_TEST="export"
. tests/cli_lib.sh

cat core/*.h layers/*.h train/*.h >"$TMP/text.txt"
T="$TMP/text.txt"
TRAIN="--data $T --batch 2 --seq 32 --lr 5e-3 --warmup 1"

# ---- model A: the tiny preset (tied head, gate, negative eigenvalues, short convs, output gate)
# shellcheck disable=SC2086
expect_exit 0 "checkpoint:" "train tiny model" "$GDP" train $TRAIN --steps 3 --out "$TMP/a"
expect_exit 0 "written to $TMP/a.h5" "eval --dump-logits" "$GDP" eval --checkpoint "$TMP/a" --data "$T" --batch 2 \
    --seq 80 --batches 1 --dump-logits "$TMP/a.h5"
loss=$(sed -n 's/^loss \([0-9.]*\) .*/\1/p' "$TMP/out")
"$PY" - "$TMP/a.h5" "$loss" >"$TMP/py" 2>&1 <<'EOF' && ok "dump: shapes, and its logits give eval's loss" || { bad "dump"; cat "$TMP/py"; }
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
ids, tg, lg = f["input_ids"][()], f["targets"][()], f["logits"][()].astype(np.float64)
assert ids.shape == (2, 80) and ids.dtype == np.int32 and tg.shape == (2, 80), (ids.shape, ids.dtype, tg.shape)
assert lg.shape == (2, 80, 256) and f["logits"].dtype == np.float32, lg.shape
assert (ids[:, 1:] == tg[:, :-1]).all(), "targets are not the next input ids"
m = lg.max(-1, keepdims=True)
lse = (m[..., 0] + np.log(np.exp(lg - m).sum(-1)))
ce = (lse - np.take_along_axis(lg, tg[..., None].astype(np.int64), -1)[..., 0]).mean()
assert abs(ce - float(sys.argv[2])) < 1e-4, (ce, sys.argv[2])
EOF

expect_exit 0 "exported 2 layers" "export tiny model" "$PY" scripts/export_hf.py "$TMP/a" "$TMP/hf_a"
check_export() { # check_export CKPT HF_DIR TIED
    "$PY" - "$1" "$2" "$3" <<'EOF'
import json, sys, h5py, numpy as np
from safetensors.numpy import load_file
ckpt, hf, tied = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
c = json.load(open(hf + "/config.json"))
st = load_file(hf + "/model.safetensors")
with h5py.File(ckpt, "r") as f:
    params = {k: v[()] for k, v in f["params"].items()}
    text = f.attrs["config"]
ours = dict(line.split(" = ", 1) for line in text.strip().splitlines())
assert c["model_type"] == "gated_deltaproduct" and c["architectures"] == ["GatedDeltaProductForCausalLM"], c
for key in ("hidden_size", "num_hidden_layers", "num_heads", "head_dim", "num_householder", "conv_size", "vocab_size"):
    assert c[key] == int(ours[key]), key
for key in ("use_forget_gate", "allow_neg_eigval", "use_short_conv", "use_output_gate"):
    assert c[key] == (ours[key] == "true"), key
assert c["norm_eps"] == float(ours["norm_eps"]) and c["expand_v"] == float(ours["expand_v"])
assert c["intermediate_size"] == (int(ours["intermediate_size"]) or 256), c["intermediate_size"]
assert c["tie_word_embeddings"] is False and c.get("gdp_tied_embeddings", False) == tied, c
assert "mode" not in c and "num_labels" not in c
assert set(st) == set(params) | {"lm_head.weight"}, sorted(set(st) ^ set(params))
for k, v in params.items():
    assert st[k].dtype == np.float32 and st[k].shape == v.shape and np.array_equal(st[k], v), k
if tied:
    assert np.array_equal(st["lm_head.weight"], params["model.embeddings.weight"])
assert st["model.layers.0.attn.k_conv1d.weight"].shape[1] == 1 if c["use_short_conv"] else True
EOF
}
check_export "$TMP/a/ckpt_00000003.h5" "$TMP/hf_a" 1 >"$TMP/py" 2>&1 &&
    ok "export A: config.json keys, every tensor unchanged, tied head written as a copy" || { bad "export A"; cat "$TMP/py"; }

# ---- model B: untied, n_h 3, no gate, no negative eigenvalues, no output gate, no short convs,
# expand_v 2, intermediate_size from hidden_ratio
# shellcheck disable=SC2086
expect_exit 0 "checkpoint:" "train variant model" "$GDP" train $TRAIN --steps 2 --out "$TMP/b" \
    --set tie_word_embeddings=false --set num_householder=3 --set use_forget_gate=false \
    --set allow_neg_eigval=false --set use_output_gate=false --set use_short_conv=false --set expand_v=2 \
    --set intermediate_size=0
expect_exit 0 "n_h 3" "export variant model" "$PY" scripts/export_hf.py "$TMP/b/ckpt_00000002.h5" "$TMP/hf_b"
check_export "$TMP/b/ckpt_00000002.h5" "$TMP/hf_b" 0 >"$TMP/py" 2>&1 &&
    ok "export B: config.json keys, every tensor unchanged" || { bad "export B"; cat "$TMP/py"; }


# ---- the self-contained format: split mode (always), a householder model with --self-contained (a
# tied head stays tied), a classifier (gdp tasks); every tensor unchanged, the auto_map, modeling_gdp.py
check_gdp_export() { # check_gdp_export CKPT HF_DIR ARCHITECTURE
    "$PY" - "$1" "$2" "$3" <<'EOF'
import json, sys, h5py, numpy as np
from safetensors.numpy import load_file
ckpt, hf, arch = sys.argv[1:4]
c = json.load(open(hf + "/config.json"))
st = load_file(hf + "/model.safetensors")
with h5py.File(ckpt, "r") as f:
    params = {k: v[()] for k, v in f["params"].items()}
    text = f.attrs["config"]
ours = dict(line.split(" = ", 1) for line in text.strip().splitlines())
assert c["model_type"] == "gdp" and c["architectures"] == [arch], c
auto = c["auto_map"]
assert auto["AutoConfig"] == "modeling_gdp.GdpConfig" and auto["AutoModelForCausalLM"] == "modeling_gdp.GdpForCausalLM"
assert auto["AutoModelForTokenClassification"] == "modeling_gdp.GdpForTokenClassification", auto
assert open(hf + "/modeling_gdp.py").read() == open("scripts/hf/modeling_gdp.py").read()
for key in ("hidden_size", "num_hidden_layers", "num_heads", "head_dim", "num_householder", "conv_size", "vocab_size"):
    assert c[key] == int(ours[key]), key
for key in ("use_forget_gate", "allow_neg_eigval", "use_short_conv", "use_output_gate", "tie_word_embeddings",
            "split_mask_trainable"):
    assert c[key] == (ours[key] == "true"), key
assert c["norm_eps"] == float(ours["norm_eps"]) and c["expand_v"] == float(ours["expand_v"])
assert c["mode"] == ours["mode"] and c.get("num_labels", 0) == int(ours["num_labels"]), c
assert set(st) == set(params), sorted(set(st) ^ set(params))
for k, v in params.items():
    assert st[k].dtype == np.float32 and st[k].shape == v.shape and np.array_equal(st[k], v), k
EOF
}
# shellcheck disable=SC2086
expect_exit 0 "checkpoint:" "train split-mode model" "$GDP" train $TRAIN --steps 2 --set mode=split --out "$TMP/s"
expect_exit 0 "split mode" "split mode exports self-contained" "$PY" scripts/export_hf.py "$TMP/s" "$TMP/hf_s"
check_gdp_export "$TMP/s/ckpt_00000002.h5" "$TMP/hf_s" GdpForCausalLM >"$TMP/py" 2>&1 &&
    ok "export split: config.json, auto_map, modeling_gdp.py, every tensor (the masks too) unchanged" ||
    { bad "export split"; cat "$TMP/py"; }
expect_exit 0 "self-contained" "--self-contained for a householder model" "$PY" scripts/export_hf.py \
    --self-contained "$TMP/a" "$TMP/hf_a_own"
check_gdp_export "$TMP/a/ckpt_00000003.h5" "$TMP/hf_a_own" GdpForCausalLM >"$TMP/py" 2>&1 &&
    ok "export A --self-contained: the tied head stays tied, every tensor unchanged" ||
    { bad "export A --self-contained"; cat "$TMP/py"; }
expect_exit 0 "result:" "train a classifier (gdp tasks)" "$GDP" tasks --group S3 --steps 2 --batch 4 --train-len 16 \
    --test-len 16 --test-seqs 4 --out "$TMP/c" -q
expect_exit 0 "GdpForTokenClassification" "a classifier exports self-contained" "$PY" scripts/export_hf.py "$TMP/c" \
    "$TMP/hf_c"
check_gdp_export "$TMP/c/$(cat "$TMP/c/latest")" "$TMP/hf_c" GdpForTokenClassification >"$TMP/py" 2>&1 &&
    ok "export classifier: classifier.weight, num_labels, every tensor unchanged" ||
    { bad "export classifier"; cat "$TMP/py"; }

# ---- bad arguments
expect_exit 2 "usage" "export without arguments" "$PY" scripts/export_hf.py
expect_exit 1 "does not exist" "missing checkpoint" "$PY" scripts/export_hf.py "$TMP/nothing.h5" "$TMP/x"
expect_exit 1 "not a readable HDF5 file" "not HDF5" "$PY" scripts/export_hf.py "$T" "$TMP/x"
cp "$TMP/a/ckpt_00000003.h5" "$TMP/flipped.h5"
"$PY" -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); d = f["params/model.norm.weight"]; d[0] = d[0] + 1' \
    "$TMP/flipped.h5"
expect_exit 1 "CRC-32" "corrupt tensor is caught" "$PY" scripts/export_hf.py "$TMP/flipped.h5" "$TMP/x"
expect_exit 1 "--dump-logits" "dump into a missing folder" "$GDP" eval --checkpoint "$TMP/a" --data "$T" --batch 2 \
    --seq 16 --batches 1 --dump-logits "$TMP/no/such/dir/x.h5"

# ---- with torch and transformers: each variant's folder in transformers against gdp's own logits
if ! "$PY" -c 'import torch, transformers' 2>/dev/null; then
    echo "skipped: the transformers checks of the self-contained format: $PY cannot import torch and transformers" \
        "(pip install torch transformers)"
else
    # Norm weights and split masks get N(0, 0.3) noise, so that none sits at its initial value (ones,
    # the identity), where a skipped weight or a transposed mask would go unseen. The checkpoint's
    # CRCs (each tensor's, and the whole file's in its header) are written anew.
    perturb() { # perturb CKPT
        "$PY" - "$1" <<'EOF'
import sys, zlib, h5py, numpy as np
path = sys.argv[1]
rng = np.random.default_rng(7)
with h5py.File(path, "r+") as f:
    for name, ds in f["params"].items():
        if name.endswith("norm.weight") or name.endswith(".mask"):
            x = (ds[()] + rng.normal(0, 0.3, ds.shape)).astype(np.float32)
            ds[...] = x
            ds.attrs.modify("crc32", np.uint32(zlib.crc32(x.tobytes())))
data = bytearray(open(path, "rb").read())
assert data[:16] == b"gdp.c checkpoint" and int.from_bytes(data[16:24], "little") == len(data)
data[24:28] = bytes(4)  # the header's CRC-32 covers the file with its own field zeroed (train/checkpoint.h)
data[24:28] = zlib.crc32(bytes(data)).to_bytes(4, "little")
open(path, "wb").write(data)
EOF
    }
    compare() { # compare NAME HF_DIR DUMP: one line of check_hf_export.py, as ok or bad
        if "$PY" scripts/check_hf_export.py "$2" "$3" "$1" >"$TMP/out" 2>&1; then
            ok "$(grep '^PASS:' "$TMP/out" | sed 's/^PASS: //')"
        else
            bad "$1: $(grep '^FAIL:' "$TMP/out" | sed 's/^FAIL: [^:]*: //')"; tail -5 "$TMP/out"
        fi
    }
    # name: --set overrides of the tiny preset
    while IFS=: read -r name sets; do
        d="$TMP/v_$name"
        # shellcheck disable=SC2086 # $sets is a list of flags
        if ! "$GDP" train $TRAIN --steps 3 --out "$d" $sets >"$TMP/out" 2>&1; then bad "$name: train"; cat "$TMP/out"; continue; fi
        if ! perturb "$d/$(cat "$d/latest")" >"$TMP/out" 2>&1 ||
            ! "$GDP" eval --checkpoint "$d" --data "$T" --batch 2 --seq 80 --batches 1 --dump-logits "$d.h5" \
                >>"$TMP/out" 2>&1 ||
            ! "$PY" scripts/export_hf.py --self-contained "$d" "${d}_hf" >>"$TMP/out" 2>&1; then
            bad "$name: perturb, eval --dump-logits or export"; cat "$TMP/out"; continue
        fi
        compare "$name" "${d}_hf" "$d.h5"
    done <<EOF
default:
untied:--set tie_word_embeddings=false
no_output_gate:--set use_output_gate=false
no_short_conv:--set use_short_conv=false
expand_v_2:--set expand_v=2
n_h_3:--set num_householder=3
all_five:--set tie_word_embeddings=false --set use_output_gate=false --set use_short_conv=false --set expand_v=2 --set num_householder=3
no_gate_beta_01:--set use_forget_gate=false --set allow_neg_eigval=false --set conv_size=3 --set intermediate_size=0
split_r2:--set mode=split --set num_householder=2
split_r4:--set mode=split --set num_householder=4
split_r2_frozen_mask:--set mode=split --set num_householder=2 --set split_mask_trainable=false
split_r4_all_five:--set mode=split --set num_householder=4 --set tie_word_embeddings=false --set use_output_gate=false --set use_short_conv=false --set expand_v=2
split_r2_no_gate_beta_01:--set mode=split --set num_householder=2 --set use_forget_gate=false --set allow_neg_eigval=false
EOF

    # Classifiers: gdp eval takes language models only, so a copy of the checkpoint whose head is
    # named lm_head (num_labels 0; the labels are the vocabulary, |S3| = 6) gives gdp's logits on a
    # shard of random ids; the classifier's own folder must give them through
    # AutoModelForTokenClassification.
    as_lm() { # as_lm CKPT LM.h5 SHARD.bin
        "$PY" - "$1" "$2" "$3" <<'EOF'
import sys, h5py, numpy as np
src, dst, shard = sys.argv[1:4]
with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:  # a plain HDF5 file: gdp warns of no header
    for k, v in f.attrs.items():
        g.attrs[k] = v
    text = f.attrs["config"]
    text = text.decode() if isinstance(text, bytes) else str(text)
    cfg = dict(l.split(" = ", 1) for l in text.strip().splitlines())
    g.attrs["config"] = "".join(f"{k} = {'0' if k == 'num_labels' else v}\n" for k, v in cfg.items())
    for group in ("params", "optim/m", "optim/v"):
        for name, ds in f[group].items():
            new = "lm_head.weight" if name == "classifier.weight" else name
            g.create_dataset(f"{group}/{new}", data=ds[()]).attrs["crc32"] = ds.attrs["crc32"]
toks = np.random.default_rng(3).integers(0, int(cfg["vocab_size"]), 4096).astype(np.uint16)
head = np.zeros(256, np.int32)
head[:3] = 20240520, 1, len(toks)  # llm.c's shard header
with open(shard, "wb") as f:
    f.write(head.tobytes() + toks.tobytes())
EOF
    }
    for mode in householder split; do
        d="$TMP/c_$mode"
        if ! "$GDP" tasks --group S3 --mode "$mode" --n-h 2 --steps 3 --batch 4 --train-len 16 --test-len 16 \
                --test-seqs 4 --out "$d" -q >"$TMP/out" 2>&1 || ! perturb "$d/$(cat "$d/latest")" >>"$TMP/out" 2>&1 ||
            ! as_lm "$d/$(cat "$d/latest")" "$d.lm.h5" "${d}_val.bin" >>"$TMP/out" 2>&1 ||
            ! "$GDP" eval --checkpoint "$d.lm.h5" --data "${d}_val.bin" --batch 2 --seq 80 --batches 1 --dump-logits "$d.h5" \
                >>"$TMP/out" 2>&1 || ! "$PY" scripts/export_hf.py "$d" "${d}_hf" >>"$TMP/out" 2>&1; then
            bad "classifier $mode: tasks, eval --dump-logits or export"; cat "$TMP/out"; continue
        fi
        compare "classifier_S3_$mode" "${d}_hf" "$d.h5"
    done

    # generate(): greedy continuations as gdp generate --temperature 0 gives them (byte tokens)
    for name in untied split_r2; do
        want=$("$GDP" generate --checkpoint "$TMP/v_$name" --prompt "static int" --tokens 12 --temperature 0 2>/dev/null)
        got=$("$PY" - "$TMP/v_${name}_hf" 2>"$TMP/out" <<'EOF'
import sys, torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
out = model.generate(torch.tensor([list(b"static int")]), max_new_tokens=12, do_sample=False)
sys.stdout.buffer.write(bytes(out[0].tolist()))
EOF
)
        [ -n "$want" ] && [ "$got" = "$want" ] && ok "$name: generate() greedy = gdp generate --temperature 0" ||
            { bad "$name: generate() '$got', gdp '$want'"; tail -5 "$TMP/out"; }
    done
fi

[ "$fail" -eq 0 ] && echo "cli export: all ok" || echo "cli export: FAILED"
exit "$fail"

#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# gdp eval --dump-logits and scripts/export_hf.py (checkpoint -> Hugging Face folder for fla), on
# the CPU without torch: the dump's logits give eval's loss; the export holds every checkpoint
# tensor unchanged under fla's names, a config.json fla's GatedDeltaProductConfig reads, and clear
# errors for what cannot be exported. Needs python3 with h5py, numpy and safetensors, else it is
# skipped. (fla itself runs the exported model on a GPU machine: STEPS=python scripts/gpu_check.sh.)
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

# ---- what cannot be exported, and bad arguments
# shellcheck disable=SC2086
expect_exit 0 "checkpoint:" "train split-mode model" "$GDP" train $TRAIN --steps 2 --set mode=split --out "$TMP/s"
expect_exit 1 "householder mode only" "split mode is refused" "$PY" scripts/export_hf.py "$TMP/s" "$TMP/hf_s"
[ ! -e "$TMP/hf_s/model.safetensors" ] && ok "nothing written for split mode" || bad "split export wrote files"
expect_exit 2 "usage" "export without arguments" "$PY" scripts/export_hf.py
expect_exit 1 "does not exist" "missing checkpoint" "$PY" scripts/export_hf.py "$TMP/nothing.h5" "$TMP/x"
expect_exit 1 "not a readable HDF5 file" "not HDF5" "$PY" scripts/export_hf.py "$T" "$TMP/x"
cp "$TMP/a/ckpt_00000003.h5" "$TMP/flipped.h5"
"$PY" -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); d = f["params/model.norm.weight"]; d[0] = d[0] + 1' \
    "$TMP/flipped.h5"
expect_exit 1 "CRC-32" "corrupt tensor is caught" "$PY" scripts/export_hf.py "$TMP/flipped.h5" "$TMP/x"
expect_exit 1 "--dump-logits" "dump into a missing folder" "$GDP" eval --checkpoint "$TMP/a" --data "$T" --batch 2 \
    --seq 16 --batches 1 --dump-logits "$TMP/no/such/dir/x.h5"

[ "$fail" -eq 0 ] && echo "cli export: all ok" || echo "cli export: FAILED"
exit "$fail"

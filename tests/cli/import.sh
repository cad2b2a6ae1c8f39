#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# gdp import: scripts/export_hf.py's folder back into a checkpoint with the same parameters bit for
# bit (fla's format with tied and untied heads and a BPE tokenizer.json, gdp's own format for split mode
# and --self-contained), which eval, generate and train --resume take;
# and the config keys and tensors gdp.c cannot honour refused by name. Needs python3 with h5py, numpy
# and safetensors (the exporter's), else it is skipped.
PY=${PYTHON:-python3}
if ! "$PY" -c 'import h5py, numpy, safetensors' 2>/dev/null; then
    echo "skipped: $PY lacks h5py, numpy or safetensors (pip install h5py numpy safetensors)"
    exit 0
fi
CLI_TEST="import"
. tests/cli_lib.sh

cat core/*.h layers/*.h >"$TMP/text.txt"
T="$TMP/text.txt"
expect_exit 0 "tokenizer" "prepare BPE data" "$GDP" prepare --input "$T" --out "$TMP/data" --tokenizer bpe --vocab 300
# A: the tiny preset on BPE data (tied head, tokenizer); B: untied, n_h 3, no output gate, on bytes
expect_exit 0 "checkpoint:" "train model A" "$GDP" train --data "$TMP/data" --batch 2 --seq 32 --steps 3 --out "$TMP/a"
expect_exit 0 "checkpoint:" "train model B" "$GDP" train --data "$T" --batch 2 --seq 32 --steps 3 --out "$TMP/b" \
    --set tie_word_embeddings=false --set num_householder=3 --set use_output_gate=false --set conv_size=3
# C: split mode, r 2 (exported in gdp's own format, scripts/hf/modeling_gdp.py); d: A in that format
expect_exit 0 "checkpoint:" "train model C" "$GDP" train --data "$T" --batch 2 --seq 32 --steps 3 --out "$TMP/c" \
    --set mode=split --set num_householder=2
cp -r "$TMP/a" "$TMP/d"

same_params() { # same_params CKPT_A CKPT_B: every /params dataset equal bit for bit, the same names
    "$PY" - "$1" "$2" <<'PYEOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
pa, pb = a["params"], b["params"]
assert set(pa) == set(pb), sorted(set(pa) ^ set(pb))
for k in pa:
    x, y = pa[k][()], pb[k][()]
    assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), k
ca = dict(l.split(" = ", 1) for l in a.attrs["config"].strip().splitlines())
cb = dict(l.split(" = ", 1) for l in b.attrs["config"].strip().splitlines())
diff = sorted(k for k in ca if ca[k] != cb.get(k) and k != "tokenizer")
assert not diff, [(k, ca[k], cb.get(k)) for k in diff]
assert "optim" in b and int(b.attrs["step"]) == 0
PYEOF
}

for x in a b c d; do
    ck="$TMP/$x/$(cat "$TMP/$x/latest")"
    own=""; [ "$x" = d ] && own="--self-contained"
    # shellcheck disable=SC2086 # $own is empty or one flag
    expect_exit 0 "exported" "export $x" "$PY" scripts/export_hf.py $own "$TMP/$x" "$TMP/hf_$x"
    expect_exit 0 "imported" "import $x" "$GDP" import --from "$TMP/hf_$x" --out "$TMP/$x.h5"
    same_params "$ck" "$TMP/$x.h5" >"$TMP/py" 2>&1 && ok "$x: export -> import gives the same parameters bit for bit" ||
        { bad "$x: round trip"; cat "$TMP/py"; }
    data="$T"; case $x in a | d) data="$TMP/data" ;; esac
    l0=$("$GDP" eval --checkpoint "$ck" --data "$data" --batch 2 --seq 32 --batches 2 2>&1 | sed -n 's/^loss \([0-9.]*\) .*/\1/p')
    l1=$("$GDP" eval --checkpoint "$TMP/$x.h5" --data "$data" --batch 2 --seq 32 --batches 2 2>&1 | sed -n 's/^loss \([0-9.]*\) .*/\1/p')
    [ -n "$l0" ] && [ "$l0" = "$l1" ] && ok "$x: eval of the import = eval of the original ($l1)" || bad "$x: eval $l0 vs $l1"
    g0=$("$GDP" generate --checkpoint "$ck" --prompt "static int" --tokens 12 --temperature 0 2>/dev/null)
    g1=$("$GDP" generate --checkpoint "$TMP/$x.h5" --prompt "static int" --tokens 12 --temperature 0 2>/dev/null)
    [ -n "$g0" ] && [ "$g0" = "$g1" ] && ok "$x: generate from the import = from the original" || bad "$x: generate '$g0' vs '$g1'"
done
[ -s "$TMP/hf_a/tokenizer.json" ] && [ -s "$TMP/a.tokenizer.json" ] && ok "the tokenizer.json goes out and comes back in" ||
    bad "tokenizer.json not exported or imported"
expect_exit 0 "done" "train --resume from an import" "$GDP" train --data "$TMP/data" --batch 2 --seq 32 --steps 2 \
    --out "$TMP/a2" --resume "$TMP/a.h5"
expect_exit 0 "imported" "import into a folder" "$GDP" import --from "$TMP/hf_b" --out "$TMP/bdir"
expect_exit 0 "generated" "generate from the folder" "$GDP" generate --checkpoint "$TMP/bdir" --prompt "x" --tokens 3

# refusals, each by name
refuse() { # refuse NEEDLE WHAT PYTHON-EDIT-OF-c(config)-AND-st(tensors)
    rm -rf "$TMP/bad" && cp -r "$TMP/hf_b" "$TMP/bad"
    "$PY" - "$TMP/bad" "$3" <<'PYEOF'
import json, sys
from safetensors.numpy import load_file, save_file
import numpy as np
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
st = load_file(d + "/model.safetensors")
exec(sys.argv[2])
json.dump(c, open(d + "/config.json", "w"))
save_file(st, d + "/model.safetensors")
PYEOF
    expect_exit 1 "$1" "$2" "$GDP" import --from "$TMP/bad" --out "$TMP/bad.h5"
}
refuse "num_v_heads" "grouped value heads are refused" 'c["num_v_heads"] = 2 * c["num_heads"]'
refuse "conv_bias" "conv biases are refused" 'c["conv_bias"] = True'
refuse "'attn'" "hybrid attention layers are refused" 'c["attn"] = {"layers": [1], "num_heads": 2}'
refuse "hidden_act" "another MLP activation is refused" 'c["hidden_act"] = "gelu"'
refuse "rope_theta" "an unknown key is refused by name" 'c["rope_theta"] = 10000.0'
refuse "use_forget_gate" "a missing key is refused by name" 'del c["use_forget_gate"]'
refuse "q_conv1d.bias" "an extra tensor is refused by name" 'st["model.layers.0.attn.q_conv1d.bias"] = np.zeros(2, np.float32)'
refuse "k_proj.weight" "a missing tensor is named" 'del st["model.layers.1.attn.k_proj.weight"]'
refuse "shape" "a tensor of the wrong shape is named" 'st["model.norm.weight"] = np.ones(3, np.float32)'
expect_exit 1 "config.json" "a folder without config.json" "$GDP" import --from "$TMP" --out "$TMP/x.h5"
expect_exit 2 "--from" "import without --from" "$GDP" import --out "$TMP/x.h5"
exit $fail

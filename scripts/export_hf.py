#!/usr/bin/env python3
"""Export a gdp.c checkpoint to a Hugging Face folder that fla's GatedDeltaProductForCausalLM loads.

    python3 scripts/export_hf.py CKPT OUTDIR

CKPT is a checkpoint file (ckpt_NNNNNNNN.h5) or a training folder (its `latest` checkpoint).
OUTDIR gets config.json (fla's GatedDeltaProductConfig), model.safetensors (float32) and, when the
checkpoint's data had one, the tokenizer's tokenizer.json. Needs
h5py, numpy and safetensors only. Then, with fla importable:

    from fla.models import GatedDeltaProductForCausalLM
    model = GatedDeltaProductForCausalLM.from_pretrained(OUTDIR)

Our parameter names and shapes already are fla's (conv weights [C, 1, W] included), so the
tensors are copied as they are. A tied head is written untied: lm_head.weight is a copy of the
embedding matrix and config.json says tie_word_embeddings = false (with gdp_tied_embeddings =
true for the record), because fla's list-form _tied_weights_keys makes transformers 5.x fail to
build a tied GatedDeltaProductForCausalLM. The logits are the same. Only householder-mode language
models can be exported: fla has no split mode and no per-position classifier.
"""
import json
import os
import shutil
import sys
import zlib

import h5py
import numpy as np
from safetensors.numpy import save_file

# Our config keys that are fla GatedDeltaProductConfig keys, with their types.
FLA_KEYS = {
    "hidden_size": int, "num_hidden_layers": int, "num_heads": int, "head_dim": int, "expand_v": float,
    "num_householder": int, "use_forget_gate": bool, "allow_neg_eigval": bool, "use_short_conv": bool,
    "conv_size": int, "use_output_gate": bool, "hidden_ratio": int, "intermediate_size": int,
    "vocab_size": int, "norm_eps": float, "tie_word_embeddings": bool, "initializer_range": float,
}
# Our own keys: checked, not written.
OWN_KEYS = {"mode", "num_labels", "split_mask_trainable", "tokenizer"}


class ExportError(Exception):
    pass


def parse_config(text, origin):
    cfg = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise ExportError(f"{origin}: config line {lineno} '{line}' is not 'key = value'")
        key, value = (s.strip() for s in line.split("=", 1))
        cfg[key] = value
    return cfg


def typed(key, value, kind):
    try:
        if kind is bool:
            if value not in ("true", "false", "True", "False", "1", "0", "yes", "no"):
                raise ValueError
            return value in ("true", "True", "1", "yes")
        return kind(value)
    except ValueError:
        raise ExportError(f"config key {key} = '{value}' is not a {kind.__name__}") from None


def intermediate_size(c):
    if c["intermediate_size"] > 0:
        return c["intermediate_size"]
    h = int(c["hidden_size"] * c["hidden_ratio"] * 2 / 3)  # as fla's GatedMLP rounds it
    return 256 * ((h + 255) // 256)


def fla_config(cfg, origin):
    """Our `key = value` config as fla's GatedDeltaProductConfig dict."""
    mode = cfg.get("mode", "householder")
    if mode != "householder":
        raise ExportError(f"{origin} is a {mode}-mode model: fla's GatedDeltaProduct has householder mode only, "
                          "so it cannot be exported (train with mode = householder)")
    if int(cfg.get("num_labels", "0")) > 0:
        raise ExportError(f"{origin} has a classification head (num_labels = {cfg['num_labels']}): only language "
                          "models (num_labels = 0) map to GatedDeltaProductForCausalLM")
    unknown = sorted(set(cfg) - set(FLA_KEYS) - OWN_KEYS)
    if unknown:
        raise ExportError(f"{origin}: unknown config keys {unknown}: this exporter is older than the checkpoint")
    missing = sorted(set(FLA_KEYS) - set(cfg))
    if missing:
        raise ExportError(f"{origin}: config lacks {missing}: not a complete gdp.c model config")
    c = {k: typed(k, cfg[k], kind) for k, kind in FLA_KEYS.items()}
    c["intermediate_size"] = intermediate_size(c)  # explicit, so no rounding rule can differ
    out = {
        "model_type": "gated_deltaproduct",
        "architectures": ["GatedDeltaProductForCausalLM"],
        "attn_mode": "chunk",
        "hidden_act": "swish",  # the MLP is SwiGLU
        "fuse_norm": True, "fuse_swiglu": True, "fuse_cross_entropy": True, "fuse_linear_cross_entropy": False,
        "use_l2warp": False,
        "attn": None,  # no hybrid attention layers
        "dtype": "float32",
    }
    out.update(c)
    if cfg.get("tokenizer"):
        out["gdp_tokenizer"] = cfg["tokenizer"]  # informational: the file the data was prepared with
    return out


def expected_shapes(c):
    """Every parameter of the gdp.c checkpoint, name -> shape, in fla's names."""
    D, H, K, n = c["hidden_size"], c["num_heads"], c["head_dim"], c["num_householder"]
    Vh = round(c["expand_v"] * K)
    kd, vd, W, inter = H * K, H * Vh, c["conv_size"], c["intermediate_size"]
    s = {"model.embeddings.weight": (c["vocab_size"], D), "model.norm.weight": (D,)}
    if not c["tie_word_embeddings"]:  # tied: the checkpoint has no head of its own
        s["lm_head.weight"] = (c["vocab_size"], D)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s[p + "attn_norm.weight"] = (D,)
        s[p + "mlp_norm.weight"] = (D,)
        a = p + "attn."
        s[a + "q_proj.weight"] = (kd, D)
        s[a + "k_proj.weight"] = (n * kd, D)
        s[a + "v_proj.weight"] = (n * vd, D)
        s[a + "b_proj.weight"] = (n * H, D)
        if c["use_forget_gate"]:
            s[a + "a_proj.weight"] = (H, D)
            s[a + "A_log"] = (H,)
            s[a + "dt_bias"] = (H,)
        if c["use_short_conv"]:
            s[a + "q_conv1d.weight"] = (kd, 1, W)
            s[a + "k_conv1d.weight"] = (n * kd, 1, W)
            s[a + "v_conv1d.weight"] = (n * vd, 1, W)
        if c["use_output_gate"]:
            s[a + "g_proj.weight"] = (vd, D)
        s[a + "o_norm.weight"] = (Vh,)
        s[a + "o_proj.weight"] = (D, vd)
        m = p + "mlp."
        s[m + "gate_proj.weight"] = (inter, D)
        s[m + "up_proj.weight"] = (inter, D)
        s[m + "down_proj.weight"] = (D, inter)
    return s


def resolve(path):
    if os.path.isdir(path):
        latest = os.path.join(path, "latest")
        if not os.path.exists(latest):
            raise ExportError(f"{path} is a folder without a 'latest' file: give a ckpt_*.h5 file")
        with open(latest) as f:
            path = os.path.join(path, f.read().strip())
    if not os.path.isfile(path):
        raise ExportError(f"checkpoint {path} does not exist")
    return path


def export(ckpt, outdir):
    """Writes outdir/config.json and outdir/model.safetensors; returns the fla config dict."""
    ckpt = resolve(ckpt)
    try:
        f = h5py.File(ckpt, "r")
    except OSError as e:
        raise ExportError(f"{ckpt} is not a readable HDF5 file: {e}") from None
    with f:
        if f.attrs.get("format") != "gdp.c checkpoint":
            raise ExportError(f"{ckpt} is not a gdp.c checkpoint (its 'format' attribute is "
                              f"{f.attrs.get('format')!r})")
        text = f.attrs["config"]
        text = text.decode() if isinstance(text, bytes) else str(text)
        config = fla_config(parse_config(text, ckpt), ckpt)
        if "params" not in f:
            raise ExportError(f"{ckpt} has no /params group")
        params = {}
        for name, ds in f["params"].items():
            params[name] = np.asarray(ds[()], dtype=np.float32)
            crc = ds.attrs.get("crc32")
            if crc is not None and zlib.crc32(params[name].tobytes()) != int(crc):
                raise ExportError(f"{ckpt}: /params/{name} fails its CRC-32 check: the file is corrupt")
        step = int(f.attrs.get("step", -1))
    want = expected_shapes(config)
    missing = sorted(set(want) - set(params))
    extra = sorted(set(params) - set(want))
    if missing or extra:
        raise ExportError(f"{ckpt}: parameters do not match the config: missing {missing[:5]}, unexpected "
                          f"{extra[:5]}")
    for name, shape in want.items():
        if params[name].shape != shape:
            raise ExportError(f"{ckpt}: {name} has shape {params[name].shape}, fla expects {shape}")
    if config["tie_word_embeddings"]:  # written untied (see the top of this file)
        params["lm_head.weight"] = params["model.embeddings.weight"].copy()
        want["lm_head.weight"] = want["model.embeddings.weight"]
        config["tie_word_embeddings"], config["gdp_tied_embeddings"] = False, True
    os.makedirs(outdir, exist_ok=True)
    config["gdp_step"] = step
    with open(os.path.join(outdir, "config.json"), "w") as out:
        json.dump(config, out, indent=2, sort_keys=True)
        out.write("\n")
    tensors = {k: np.ascontiguousarray(params[k]) for k in sorted(want)}
    save_file(tensors, os.path.join(outdir, "model.safetensors"), metadata={"format": "pt"})
    tok = tokenizer_json(config.get("gdp_tokenizer", ""))
    if tok:
        shutil.copyfile(tok, os.path.join(outdir, "tokenizer.json"))
    return config


def tokenizer_json(path):
    """The Hugging Face tokenizer.json of the tokenizer the data was prepared with, or None: the file
    itself, or the tokenizer.json that gdp prepare writes beside its tokenizer.bin."""
    if not path:
        return None
    if path.endswith(".json") and os.path.isfile(path):
        return path
    beside = os.path.join(os.path.dirname(path), "tokenizer.json")
    return beside if os.path.isfile(beside) else None


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(argv) != 3:
        print("usage: python3 scripts/export_hf.py CKPT OUTDIR   (--help for more)", file=sys.stderr)
        return 2
    try:
        config = export(argv[1], argv[2])
    except ExportError as e:
        print(f"export_hf: {e}", file=sys.stderr)
        return 1
    n = config["num_hidden_layers"]
    print(f"exported {n} layers (hidden {config['hidden_size']}, vocab {config['vocab_size']}, "
          f"n_h {config['num_householder']}) to {argv[2]}/config.json and {argv[2]}/model.safetensors")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

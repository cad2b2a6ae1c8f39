#!/usr/bin/env python3
"""Export a gdp.c checkpoint to a Hugging Face folder.

    python3 scripts/export_hf.py [--self-contained] CKPT OUTDIR

CKPT is a checkpoint file (ckpt_NNNNNNNN.h5) or a training folder (its `latest` checkpoint). OUTDIR
gets config.json, model.safetensors (float32, every tensor of the checkpoint unchanged under its own
name) and, when the checkpoint's data had one, the tokenizer's tokenizer.json. Needs h5py, numpy
and safetensors only. Two formats:

fla's (the default for householder-mode language models): config.json is fla's
GatedDeltaProductConfig, and with fla importable

    from fla.models import GatedDeltaProductForCausalLM
    model = GatedDeltaProductForCausalLM.from_pretrained(OUTDIR)

Our parameter names and shapes already are fla's (conv weights [C, 1, W] included). A tied head is
written untied: lm_head.weight is a copy of the embedding matrix and config.json says
tie_word_embeddings = false (with gdp_tied_embeddings = true for the record), because fla's
list-form _tied_weights_keys makes transformers 5.x fail to build a tied
GatedDeltaProductForCausalLM. The logits are the same.

Self-contained (split-mode models, classification models, and any model with --self-contained):
config.json has model_type "gdp", every gdp.c config key (mode and split_mask_trainable included)
and an auto_map to modeling_gdp.py, our plain-PyTorch model (scripts/hf/modeling_gdp.py, copied
into OUTDIR), so that with torch and transformers only

    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(OUTDIR, trust_remote_code=True)

(AutoModelForTokenClassification for a model with a classification head, num_labels > 0). A tied
head stays tied: the file has no lm_head.weight. Split mode's mask is
model.layers.<i>.attn.mask [H, r, r] (none when split_mask_trainable is false: the identity).
"""
import argparse
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
# Our own keys, with their types and the value a checkpoint without them means.
OWN_KEYS = {"mode": (str, "householder"), "num_labels": (int, "0"), "split_mask_trainable": (bool, "true")}
# The self-contained format's model file, copied into the folder.
MODELING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf", "modeling_gdp.py")


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


def model_config(cfg, origin):
    """Our `key = value` config, checked and typed (intermediate_size made explicit, so no rounding
    rule can differ)."""
    unknown = sorted(set(cfg) - set(FLA_KEYS) - set(OWN_KEYS) - {"tokenizer"})
    if unknown:
        raise ExportError(f"{origin}: unknown config keys {unknown}: this exporter is older than the checkpoint")
    missing = sorted(set(FLA_KEYS) - set(cfg))
    if missing:
        raise ExportError(f"{origin}: config lacks {missing}: not a complete gdp.c model config")
    c = {k: typed(k, cfg[k], kind) for k, kind in FLA_KEYS.items()}
    for k, (kind, default) in OWN_KEYS.items():
        c[k] = typed(k, cfg.get(k, default), kind)
    if c["mode"] not in ("householder", "split"):
        raise ExportError(f"{origin}: mode = '{c['mode']}' is neither householder nor split")
    c["intermediate_size"] = intermediate_size(c)
    return c


def fla_config(c, tokenizer):
    """fla's GatedDeltaProductConfig dict of a householder-mode language model."""
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
    out.update({k: c[k] for k in FLA_KEYS})
    if tokenizer:
        out["gdp_tokenizer"] = tokenizer  # informational: the file the data was prepared with
    return out


def gdp_config(c, tokenizer):
    """The self-contained format's config.json: GdpConfig of modeling_gdp.py."""
    classifier = c["num_labels"] > 0
    arch = "GdpForTokenClassification" if classifier else "GdpForCausalLM"
    out = {
        "model_type": "gdp",
        "architectures": [arch],
        "auto_map": {
            "AutoConfig": "modeling_gdp.GdpConfig",
            "AutoModel": "modeling_gdp.GdpModel",
            "AutoModelForCausalLM": "modeling_gdp.GdpForCausalLM",
            "AutoModelForTokenClassification": "modeling_gdp.GdpForTokenClassification",
        },
        "dtype": "float32",
    }
    out.update({k: c[k] for k in FLA_KEYS})
    out["mode"] = c["mode"]
    out["split_mask_trainable"] = c["split_mask_trainable"]
    if classifier:
        out["num_labels"] = c["num_labels"]
    if tokenizer:
        out["gdp_tokenizer"] = tokenizer
    return out


def expected_shapes(c):
    """Every parameter of the gdp.c checkpoint, name -> shape (fla's names; split mode's mask and a
    classifier are our own)."""
    D, H, K, n = c["hidden_size"], c["num_heads"], c["head_dim"], c["num_householder"]
    split = c["mode"] == "split"
    s = 1 if split else n  # k and v slots per token
    Vh = round(c["expand_v"] * K)
    kd, vd, W, inter = H * K, H * Vh, c["conv_size"], c["intermediate_size"]
    shapes = {"model.embeddings.weight": (c["vocab_size"], D), "model.norm.weight": (D,)}
    if c["num_labels"] > 0:
        shapes["classifier.weight"] = (c["num_labels"], D)
    elif not c["tie_word_embeddings"]:  # tied: the checkpoint has no head of its own
        shapes["lm_head.weight"] = (c["vocab_size"], D)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "attn_norm.weight"] = (D,)
        shapes[p + "mlp_norm.weight"] = (D,)
        a = p + "attn."
        shapes[a + "q_proj.weight"] = (kd, D)
        shapes[a + "k_proj.weight"] = (s * kd, D)
        shapes[a + "v_proj.weight"] = (s * vd, D)
        shapes[a + "b_proj.weight"] = (s * H, D)
        if c["use_forget_gate"]:
            shapes[a + "a_proj.weight"] = (H, D)
            shapes[a + "A_log"] = (H,)
            shapes[a + "dt_bias"] = (H,)
        if c["use_short_conv"]:
            shapes[a + "q_conv1d.weight"] = (kd, 1, W)
            shapes[a + "k_conv1d.weight"] = (s * kd, 1, W)
            shapes[a + "v_conv1d.weight"] = (s * vd, 1, W)
        if split and c["split_mask_trainable"]:
            shapes[a + "mask"] = (H, n, n)
        if c["use_output_gate"]:
            shapes[a + "g_proj.weight"] = (vd, D)
        shapes[a + "o_norm.weight"] = (Vh,)
        shapes[a + "o_proj.weight"] = (D, vd)
        m = p + "mlp."
        shapes[m + "gate_proj.weight"] = (inter, D)
        shapes[m + "up_proj.weight"] = (inter, D)
        shapes[m + "down_proj.weight"] = (D, inter)
    return shapes


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


def export(ckpt, outdir, self_contained=False):
    """Writes outdir/config.json and outdir/model.safetensors (and modeling_gdp.py in the
    self-contained format); returns the config.json dict. Householder-mode language models get fla's
    format unless self_contained; split-mode and classification models always get ours."""
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
        cfg = parse_config(text, ckpt)
        c = model_config(cfg, ckpt)
        if "params" not in f:
            raise ExportError(f"{ckpt} has no /params group")
        params = {}
        for name, ds in f["params"].items():
            params[name] = np.asarray(ds[()], dtype=np.float32)
            crc = ds.attrs.get("crc32")
            if crc is not None and zlib.crc32(params[name].tobytes()) != int(crc):
                raise ExportError(f"{ckpt}: /params/{name} fails its CRC-32 check: the file is corrupt")
        step = int(f.attrs.get("step", -1))
    ours = self_contained or c["mode"] != "householder" or c["num_labels"] > 0
    want = expected_shapes(c)
    missing = sorted(set(want) - set(params))
    extra = sorted(set(params) - set(want))
    if missing or extra:
        raise ExportError(f"{ckpt}: parameters do not match the config: missing {missing[:5]}, unexpected "
                          f"{extra[:5]}")
    for name, shape in want.items():
        if params[name].shape != shape:
            raise ExportError(f"{ckpt}: {name} has shape {params[name].shape}, the config gives {shape}")
    tokenizer = cfg.get("tokenizer", "")
    if ours:
        if not os.path.isfile(MODELING):
            raise ExportError(f"{MODELING} is missing: the self-contained format copies it into the folder")
        config = gdp_config(c, tokenizer)
    else:
        config = fla_config(c, tokenizer)
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
    if ours:
        shutil.copyfile(MODELING, os.path.join(outdir, "modeling_gdp.py"))
    tok = tokenizer_json(tokenizer)
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
    ap = argparse.ArgumentParser(prog="python3 scripts/export_hf.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-contained", action="store_true",
                    help="write our own format (modeling_gdp.py, trust_remote_code) also for a householder-mode "
                         "language model, instead of fla's")
    ap.add_argument("ckpt", metavar="CKPT", help="a ckpt_*.h5 file or a training folder (its latest checkpoint)")
    ap.add_argument("outdir", metavar="OUTDIR", help="the Hugging Face folder to write")
    args = ap.parse_args(argv[1:])
    try:
        config = export(args.ckpt, args.outdir, args.self_contained)
    except ExportError as e:
        print(f"export_hf: {e}", file=sys.stderr)
        return 1
    fmt = "fla's GatedDeltaProductForCausalLM" if config["model_type"] == "gated_deltaproduct" else \
        f"self-contained {config['architectures'][0]}, modeling_gdp.py"
    n = config["num_hidden_layers"]
    print(f"exported {n} layers ({config.get('mode', 'householder')} mode, hidden {config['hidden_size']}, vocab "
          f"{config['vocab_size']}, n_h {config['num_householder']}; {fmt}) to {args.outdir}/config.json and "
          f"{args.outdir}/model.safetensors")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

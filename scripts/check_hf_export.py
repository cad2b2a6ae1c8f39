"""CPU check of scripts/export_hf.py's self-contained format: the exported folder, loaded by
transformers with trust_remote_code (our scripts/hf/modeling_gdp.py, plain PyTorch), must give the
logits that gdp computed for the same token ids.

    python3 scripts/check_hf_export.py HF_DIR DUMP.h5 [NAME] [--tol 1e-4]

HF_DIR is export_hf.py's output in the self-contained format (a split-mode model, a classifier, or
any model exported with --self-contained; a classifier loads as AutoModelForTokenClassification);
DUMP.h5 comes from `gdp eval --dump-logits` on the same checkpoint
(input_ids [B,T] int32, logits [B,T,V] float32, gdp's CPU float32 forward). The model runs on the
CPU in float32. Prints one PASS or FAIL line with the relative L2 error ||ours - gdp|| / ||gdp||
and the largest absolute difference; exit status 1 on FAIL, 2 on bad arguments. Needs torch,
transformers, h5py and safetensors.
"""
import argparse
import json
import os
import sys
import time

import h5py
import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification


def load(hf_dir):
    with open(os.path.join(hf_dir, "config.json")) as f:
        config = json.load(f)
    if config.get("model_type") != "gdp":
        raise SystemExit(f"{hf_dir}: model_type is {config.get('model_type')!r}, not 'gdp': export with "
                         "--self-contained (fla's format is checked on a GPU by scripts/check_fla_export.py)")
    classifier = config.get("architectures") == ["GdpForTokenClassification"]
    auto = AutoModelForTokenClassification if classifier else AutoModelForCausalLM
    model = auto.from_pretrained(hf_dir, trust_remote_code=True)  # float32: the folder's own dtype
    return model.to("cpu", torch.float32).eval()


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 scripts/check_hf_export.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hf_dir", metavar="HF_DIR")
    ap.add_argument("dump", metavar="DUMP.h5")
    ap.add_argument("name", metavar="NAME", nargs="?", default="", help="a label for the output line")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative L2 error that passes (1e-4)")
    a = ap.parse_args(argv[1:])
    with h5py.File(a.dump, "r") as f:
        ids = torch.from_numpy(f["input_ids"][()].astype(np.int64))
        want = torch.from_numpy(f["logits"][()]).double()
    t0 = time.time()
    model = load(a.hf_dir)
    with torch.no_grad():
        got = model(input_ids=ids).logits.double()
    if got.shape != want.shape:
        print(f"FAIL: {a.name or a.hf_dir}: logits {tuple(got.shape)}, the dump has {tuple(want.shape)}")
        return 1
    err = ((got - want).norm() / want.norm()).item()
    worst = (got - want).abs().max().item()
    ok = bool(torch.isfinite(got).all()) and err <= a.tol
    B, T, V = want.shape
    print(f"{'PASS' if ok else 'FAIL'}: {a.name or a.hf_dir}: transformers + modeling_gdp.py (CPU fp32) vs gdp CPU "
          f"fp32 logits, B={B} T={T} V={V}: rel L2 {err:.2e} (<= {a.tol:g}), max abs {worst:.1e} "
          f"[{time.time() - t0:.1f} s]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

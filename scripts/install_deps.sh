#!/bin/bash
# Installs what gdp.c needs to build and test on Debian/Ubuntu (as root), skipping what is there.
# The CUDA toolkit is not installed here: when nvcc is on PATH (or in /usr/local/cuda) the CUDA
# kernels are built too, otherwise gdp builds for the CPU only.
set -euo pipefail
packages=(build-essential make pkg-config libhdf5-dev check libsubunit-dev libopenmpi-dev openmpi-bin zlib1g-dev gnuplot-nox)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "all build dependencies are installed"
fi
# Python packages for scripts/export_hf.py and its CLI test, and tokenizers for the comparison of the
# C tokenizer with Hugging Face's (tests/cli/hf_tokenizer.sh); the tests say skipped without them.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import h5py, numpy, safetensors, tokenizers' 2>/dev/null; then
    python3 -m pip install -q h5py numpy safetensors tokenizers 2>/dev/null ||
        echo "note: pip could not install h5py numpy safetensors tokenizers; the export and tokenizer tests will be skipped"
fi

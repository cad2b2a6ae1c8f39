#!/usr/bin/env python3
"""Where a kernel's time goes, from ncu's source page (SASS with stall samples), by barrier phase.

On the GPU machine:
    ncu -k regex:k_prep2_fast -c 1 --section SourceCounters --section WarpStateStats -f -o prep \
        build/gdp bench op --H 16 --n 2 --iters 1
    ncu -i prep.ncu-rep --page source --csv --print-source sass > prep_sass.csv
Then, anywhere:
    python3 bench/ncu_phases.py prep_sass.csv [--blocks N] [--hot K]

Prints the warp instructions per block (N: the grid's block count; by default the count of the
kernel's first instruction divided by --warps), the stall reasons over all samples, the opcode mix,
and for each stretch of SASS between two barriers (BAR.SYNC / BAR.RED) its instructions per block,
its share of the samples and its commonest opcodes, then the K instructions with the most samples.
A stretch is a place in the code, not a time: a loop's body counts once per pass.

By CUDA source line: with `--lines SASS --kernel KEY`, where SASS is `nvdisasm -gi -c CUBIN` of the
same build (on that machine: `cuobjdump -xelf all build/obj/kernels/gated_deltaproduct.cu.o`, then
nvdisasm -gi on the sm_90a cubin; or ptxas of the same PTX with -lineinfo elsewhere: the streams
must be the same instructions, which is checked) and KEY is part of the kernel's mangled name, each
instruction is charged to one line of its inline chain: the innermost frame inside `--within LO-HI`
(the lines of the function under study; default: the innermost frame). Prints each line's
instructions a block, its share of the samples and its main stalls (split mode's extra cost in bwd_b
was found this way).
"""
import argparse
import collections
import csv
import re
import sys


def number(row, col, ix):
    try:
        return float(row[ix[col]])
    except (KeyError, ValueError, IndexError):
        return 0.0


def opcode(sass):
    words = sass.split()
    if not words:
        return ""
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--blocks", type=int, default=0, help="blocks in the grid (default: from the first instruction)")
    ap.add_argument("--warps", type=int, default=8, help="warps a block, to derive --blocks (default 8)")
    ap.add_argument("--hot", type=int, default=15, help="how many of the most sampled instructions to list")
    ap.add_argument("--lines", help="nvdisasm -gi output of the same build: sum by CUDA source line")
    ap.add_argument("--kernel", help="with --lines: part of the kernel's mangled name (its .text section)")
    ap.add_argument("--within", help="with --lines: LO-HI, charge each instruction to its innermost frame in these lines")
    ap.add_argument("--top", type=int, default=30, help="with --lines: how many lines to list")
    a = ap.parse_args()
    if a.lines and not a.kernel:
        sys.exit("ncu_phases.py: --lines needs --kernel (part of the kernel's mangled name)")

    try:
        rows = list(csv.reader(open(a.csv, newline="")))
    except OSError as e:
        sys.exit(f"ncu_phases.py: cannot read {a.csv}: {e.strerror}")
    hdr_at = next((i for i, r in enumerate(rows) if "Source" in r and "Instructions Executed" in r), None)
    if hdr_at is None:
        sys.exit(f"ncu_phases.py: {a.csv} has no 'Source' / 'Instructions Executed' header: "
                 "export it with `ncu -i REP --page source --csv --print-source sass`")
    hdr, data = rows[hdr_at], [r for r in rows[hdr_at + 1:] if len(r) == len(rows[hdr_at])]
    if not data:
        sys.exit(f"ncu_phases.py: {a.csv} lists no instructions")
    ix = {h: i for i, h in enumerate(hdr)}
    samples_col = "Warp Stall Sampling (All Samples)"
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]

    blocks = a.blocks or max(1, round(number(data[0], "Instructions Executed", ix) / a.warps))
    executed = [number(r, "Instructions Executed", ix) / blocks for r in data]
    samples = [number(r, samples_col, ix) for r in data]
    total_samples = sum(samples) or 1.0
    print(f"{len(data)} SASS instructions; {sum(executed):,.0f} warp instructions a block over {blocks} blocks; "
          f"{sum(samples):,.0f} samples")

    by_stall = sorted(((sum(number(r, s, ix) for r in data), s[len("stall_"):]) for s in stalls), reverse=True)
    print("stalls: " + ", ".join(f"{name} {100 * v / total_samples:.1f}%" for v, name in by_stall[:8] if v > 0))

    mix = collections.Counter()
    for r, e in zip(data, executed):
        mix[opcode(r[ix["Source"]])] += e
    print("opcodes a block: " + ", ".join(f"{k} {v:,.0f}" for k, v in mix.most_common(14)))

    print("\nphases (between barriers): first-last SASS line, instructions a block, share of samples, top opcodes")
    start, ins, smp, ops = 0, 0.0, 0.0, collections.Counter()
    for i, r in enumerate(data):
        src = r[ix["Source"]]
        ins += executed[i]
        smp += samples[i]
        ops[opcode(src)] += executed[i]
        if "BAR.SYNC" in src or "BAR.RED" in src or i == len(data) - 1:
            if ins >= 1:
                top = ", ".join(f"{k} {v:,.0f}" for k, v in ops.most_common(5))
                print(f"  {start:5d}-{i:5d}  {ins:8,.0f}  {100 * smp / total_samples:5.1f}%  {top}")
            start, ins, smp, ops = i + 1, 0.0, 0.0, collections.Counter()

    print(f"\nthe {a.hot} most sampled instructions: line, executions a block, samples, main stalls, SASS")
    for i in sorted(range(len(data)), key=lambda k: -samples[k])[:a.hot]:
        main_stalls = sorted(((number(data[i], s, ix), s[len("stall_"):]) for s in stalls), reverse=True)[:2]
        why = ", ".join(f"{name} {v:.0f}" for v, name in main_stalls if v > 0)
        print(f"  {i:5d}  {executed[i]:7.2f}  {samples[i]:6.0f}  [{why}]  {data[i][ix['Source']].strip()[:64]}")

    if a.lines:
        by_source_line(a, data, ix, executed, samples, stalls, total_samples)


def inline_chains(path, kernel):
    """(inline chain of line numbers, innermost first; opcode) of each instruction of the kernel"""
    out, chain, fresh, inside = [], [], True, False
    try:
        text = open(path)
    except OSError as e:
        sys.exit(f"ncu_phases.py: cannot read {path}: {e.strerror}")
    for line in text:
        if line.startswith("//-----") and ".text." in line:
            inside = kernel in line
            continue
        if not inside:
            continue
        if line.lstrip().startswith("//## File"):
            if fresh:
                chain, fresh = [], False
            chain += [int(x) for x in re.findall(r"line (\d+)", line)]
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            out.append((chain, opcode(m.group(1))))
            fresh = True
    return out


def by_source_line(a, data, ix, executed, samples, stalls, total_samples):
    ins = inline_chains(a.lines, a.kernel)
    if len(ins) != len(data):
        sys.exit(f"ncu_phases.py: {a.lines} has {len(ins)} instructions in {a.kernel!r}, the profile {len(data)}: "
                 "not the same build, or not the same kernel")
    differ = sum(1 for (_, op), r in zip(ins, data) if op != opcode(r[ix["Source"]]))
    if differ:
        sys.exit(f"ncu_phases.py: {differ} opcodes differ between {a.lines} and the profile: not the same build")
    lo, hi = (int(x) for x in a.within.split("-")) if a.within else (None, None)
    lines_ins, lines_smp = collections.Counter(), collections.Counter()
    lines_why = collections.defaultdict(collections.Counter)
    for i, (chain, _) in enumerate(ins):
        if lo is None:
            where = chain[0] if chain else -1
        else:
            where = next((x for x in chain if lo <= x <= hi), -1)
        lines_ins[where] += executed[i]
        lines_smp[where] += samples[i]
        for s in stalls:
            lines_why[where][s[len("stall_"):]] += number(data[i], s, ix)
    print(f"\nby source line (-1: outside {a.within or 'any line'}): line, instructions a block, share of samples, main stalls")
    for where, smp in lines_smp.most_common(a.top):
        why = ", ".join(f"{k} {v:.0f}" for k, v in lines_why[where].most_common(3) if v > 0)
        print(f"  {where:6d}  {lines_ins[where]:8,.0f}  {100 * smp / total_samples:5.1f}%  [{why}]")


if __name__ == "__main__":
    main()

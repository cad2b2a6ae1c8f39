#!/usr/bin/env python3
"""Static SASS instructions of one kernel, summed by source line and by opcode, with no GPU.

Input: `nvdisasm -g -c CUBIN` of a -lineinfo build (the Makefile's NVCCFLAGS have -lineinfo), e.g.
    cuobjdump -xelf all build/obj/kernels/gated_deltaproduct.cu.o      # -> gated_deltaproduct.sm_90.cubin
    nvdisasm -g -c gated_deltaproduct.sm_90.cubin > all.sass
    python3 bench/sass_lines.py all.sass k_prep2_fastILi128ELi32ELb0E 40
cuobjdump and nvdisasm come with the CUDA toolkit, or from PyPI's nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels (unpacked; not installed by this project). Static counts: an unrolled
loop counts each copy, a rolled one once (good for comparing two versions of a kernel before
timing them)."""
import collections
import re
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, key = sys.argv[1], sys.argv[2]
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    inside, line, total = False, None, 0
    by_line, by_op = collections.Counter(), collections.Counter()
    for text in open(path):
        if text.startswith('//-----') and '.text.' in text:
            inside = key in text
            continue
        if not inside:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', text)
        if m:
            line = f'{m.group(1).split("/")[-1]}:{m.group(2)}'
            continue
        m = re.match(r'\s*/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)', text)
        if m:
            total += 1
            by_line[line] += 1
            by_op[m.group(1).split('.')[0]] += 1
    if not total:
        sys.exit(f'no kernel whose section name contains {key!r} in {path}')
    print('instructions', total)
    for where, n in by_line.most_common(top):
        print(f'{n:6d}  {where}')
    print('opcodes:', ', '.join(f'{op} {n}' for op, n in by_op.most_common(25)))


if __name__ == '__main__':
    main()

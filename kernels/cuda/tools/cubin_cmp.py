#!/usr/bin/env python3
"""cubin_cmp.py BEFORE.cubin... -- AFTER.cubin...: per-kernel comparison of cubin sections, to prove
that a restructuring of kernels/cuda left the machine code unchanged (no cuobjdump needed).
Make the cubins with the flags of build/cuda.bzl, one architecture each, e.g.
  nvcc -cubin -O3 -std=c++17 -Xptxas=-warn-spills -lineinfo -I. \
       -gencode=arch=compute_90a,code=sm_90a -o X.sm_90a.cubin kernels/cuda/bwd/bwd_sm80.cu
(the architecture is read from the name: NAME.ARCH.cubin).
Reads ELF64 section headers; for every kernel (a .text.<name> section) compares the bytes of
.text.<name> (the SASS), the attributes of .nv.info.<name> (registers, barriers, stack, param
layout; the symbol index inside EIATTR_PARAM_CBANK masked: it is a position in the file's symbol
table, which moves when a file holds other functions), .nv.constant0.<name> and the size of
.nv.shared.<name>. Prints identical / different / only-before / only-after."""
import struct, sys
def sections(path):
    d = open(path, 'rb').read()
    shoff, = struct.unpack_from('<Q', d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', d, 0x3A)
    hdrs = []
    for i in range(shnum):
        name, typ, flags, addr, off, size = struct.unpack_from('<IIQQQQ', d, shoff + i * shentsize)
        hdrs.append((name, typ, off, size))
    stro = hdrs[shstrndx][2]
    out = {}
    for name, typ, off, size in hdrs:
        n = d[stro + name:d.index(b'\0', stro + name)].decode()
        out[n] = d[off:off + size] if typ != 8 else ('NOBITS', size)
    return out
def info_attrs(blob):
    """.nv.info entries: (format, attr, payload). Format 0x04 (EIFMT_SVAL): 2-byte size + payload;
    0x03 (HVAL): 2-byte value; 0x02 (BVAL): 1 byte; 0x01 (NVAL): none."""
    out = []; i = 0
    while i < len(blob):
        fmt, attr = blob[i], blob[i + 1]
        if fmt == 4:
            sz = struct.unpack_from('<H', blob, i + 2)[0]; out.append((attr, blob[i + 4:i + 4 + sz])); i += 4 + sz
        elif fmt == 3: out.append((attr, blob[i + 2:i + 4])); i += 4
        elif fmt == 2: out.append((attr, blob[i + 2:i + 3])); i += 4
        else: out.append((attr, b'')); i += 4
    return out

def norm_info(blob):
    """The attributes with the symbol index of EIATTR_PARAM_CBANK (0x0a: the constant bank's
    symbol, a position in the file's symbol table) masked."""
    if blob is None: return None
    return [(a, p[4:] if a == 0x0a else p) for a, p in info_attrs(blob)]

def shared_size(x):
    if x is None: return 0
    return x[1] if isinstance(x, tuple) else len(x)

args = sys.argv[1:]; k = args.index('--')
def gather(paths):
    allk = {}
    for p in paths:
        s = sections(p); arch = p.rsplit('.', 2)[-2]
        for n in s:
            if n.startswith('.text.'):
                kn = n[6:]
                allk[(arch, kn)] = (s.get('.text.' + kn), norm_info(s.get('.nv.info.' + kn)), s.get('.nv.constant0.' + kn), shared_size(s.get('.nv.shared.' + kn)))
    return allk
b = gather(args[:k]); a = gather(args[k + 1:])
same = diff = 0
for key in sorted(set(b) | set(a)):
    if key not in a: print('only-before', *key); continue
    if key not in b: print('only-after', *key); continue
    parts = [nm for nm, x, y in zip(('text', 'info', 'const0', 'shared'), b[key], a[key]) if x != y]
    if parts: diff += 1; print('DIFFERENT', key[0], key[1], ','.join(parts), 'text bytes %d -> %d' % (len(b[key][0]), len(a[key][0])))
    else: same += 1
print('kernels/functions compared: %d identical, %d different' % (same, diff))

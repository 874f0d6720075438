"""merge_tables.py: the RESULTS.md table from one flash_bench and one torch_sdpa_bench.py output.

usage: python3 merge_tables.py FLASH_BENCH.txt TORCH_SDPA_BENCH.txt
Prints | D | S | causal | dtype | cuda | flash | cudnn | cuda / flash | (TFLOP/s), rows in the
order flash_bench printed them.
"""
import sys


def rows(path, ncols):
    out = []
    for line in open(path):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) >= ncols and c[0].isdigit():
            out.append(c)
    return out


def main():
    ours = rows(sys.argv[1], 9)     # D S B H causal dtype ms TFLOP/s err
    torch = rows(sys.argv[2], 8)    # D S causal dtype flash_ms flash_tf cudnn_ms cudnn_tf
    ref = {(t[0], t[1], t[2], t[3]): t for t in torch}
    print("| D | S | causal | dtype | cuda | flash | cudnn | cuda / flash |")
    print("|---|---|---|---|---|---|---|---|")
    for o in ours:
        d, s, causal, dtype, tf = o[0], o[1], o[4], o[5], o[7]
        t = ref.get((d, s, causal, dtype))
        if t is None:
            continue
        ratio = float(tf) / float(t[5]) if t[5].replace(".", "", 1).isdigit() else float("nan")
        print(f"| {d} | {s} | {causal} | {dtype} | {tf} | {t[5]} | {t[7]} | {ratio:.2f} |")


if __name__ == "__main__":
    main()

"""The baseline for verify: ``python bench/read_files.py STORE`` reads every file of the store
(outside ``_rocketlake``) in 64 MiB blocks, a fresh process, and prints the bytes read."""
import os
import sys

if __name__ == "__main__":
    total = 0
    for d, _, files in os.walk(sys.argv[1]):
        if "_rocketlake" in d:
            continue
        for f in files:
            with open(os.path.join(d, f), "rb", buffering=0) as fh:
                while True:
                    b = fh.read(64 << 20)
                    if not b:
                        break
                    total += len(b)
    print(total)

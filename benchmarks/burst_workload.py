"""A burst of small kernel launches for SECONDS (one CUDA API call each), with a cuBLAS matmul every
100,000 launches: a large real capture for the benchmark (not committed: too large for the repository).

Made on an H200 with nsys 2025.3 (../shared/capture/: its capture.sh, or the same steps by hand):
    nsys profile -t cuda,nvtx,cublas --cuda-memory-usage=true -s none --cpuctxsw=none \
        -o burst28 python3 burst_workload.py 28
then QdstrmImporter and `nsys export --type sqlite`. On 2026-12-01 a 28 s burst gave 3,571,062 CUDA API
calls in a 280,424,448 B export (sha256 8bf3ed5b50d4...), a 15 s burst 2,091,034 calls (162,283,520 B);
benchmarks/data/ holds them where they were brought back (xz-compressed from the device, unpacked here).
On 2026-12-07 the device lent an H100 (nsys 2025.3.1, the same capture.sh): a 28 s burst gave 5,597,102
CUDA API calls and 2,798,083 kernels in a 442,986,496 B export (sha256 caca4cc03735...), now burst28.sqlite.
Usage: burst_workload.py SECONDS"""
import sys
import time

import torch

secs = float(sys.argv[1])
x = torch.zeros(1, device="cuda")
a = torch.randn(256, 256, device="cuda")
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("burst")
t0, n = time.monotonic(), 0
while time.monotonic() - t0 < secs:
    for _ in range(1000):
        x.add_(1)
    n += 1000
    if n % 100000 == 0:
        a = a @ a / 256
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
print("launches", n, flush=True)

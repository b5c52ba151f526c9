"""A rank program for launcher tests: rank 1 fails mid-run (exception or a signal)."""
import os
import signal
import sys
import time

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    dist.init_process_group("gloo")
    how = sys.argv[1]
    for step in range(1, 6):
        if dist.get_rank() == 1 and step == 3:
            if how == "raise":
                raise RuntimeError(f"injected failure at step {step}")
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()
        time.sleep(0.1)


main()

"""A rank program for launcher tests: rank 1 sleeps forever, rank 0 waits for it in a barrier."""
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ready", flush=True)
if dist.get_rank() == 1:
    while True:
        time.sleep(3600)  # the hang
dist.barrier()

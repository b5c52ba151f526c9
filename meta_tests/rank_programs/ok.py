"""A rank program for launcher tests: every rank prints its rank and exits 0."""
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} of {dist.get_world_size()}", flush=True)
dist.barrier()
dist.destroy_process_group()

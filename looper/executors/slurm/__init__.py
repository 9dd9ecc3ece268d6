"""The slurm executor: each run a SLURM batch job (executor.py), the client tools and the watch of a job
(client.py), what the scheduler's output means (scheduler.py, pure). docs/SLURM.md."""

"""How processes start, once: which launcher started this one (detect), Slurm's side (slurm), bench's own
ranks started and stopped (supervise), Horovod's Gloo spawner (horovod_gloo), and which Python environment
holds each framework (envs). Nothing here imports a framework at module level."""

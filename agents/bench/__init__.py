"""On-demand benchmarks and the cgroup harness they (and the real-kernel tests) use to stand in
for a container runtime: creating groups, starting real processes in them, cleaning up."""

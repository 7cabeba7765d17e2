"""The lab: Kalena whole on one machine — nodes that are cgroup subtrees with their own Docker
engines, loopback addresses and real agents (README.md beside this file; docs/lab.md)."""

"""The lab's kubelet double: one process per node that runs the pods bound to the node as real
containers on the node's engine, inside the node's cgroup subtree (see ``agents/lab/README.md``
and docs/lab.md, "The kubelet double")."""

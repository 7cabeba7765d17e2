"""HTTP endpoints Kubernetes itself calls: the mutating admission webhook (kube-apiserver) and
the scheduler extender (kube-scheduler). Thin views over the pure decisions in
:mod:`agents.orchestrators.kubernetes.admission` and :mod:`~agents.orchestrators.kubernetes.extender`;
served only on the mutual-TLS hooks listener of ``kalena serve --tls-port`` (:mod:`.listener`,
docs/kubernetes-admission.md), never on the console's port."""

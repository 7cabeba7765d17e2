"""HTTP endpoints Kubernetes itself calls: the mutating admission webhook (kube-apiserver) and
the scheduler extender (kube-scheduler). Thin views over the pure decisions in
:mod:`agents.orchestrators.kubernetes.admission` and :mod:`~agents.orchestrators.kubernetes.extender`;
served over TLS by ``kalena serve --tls-port`` (docs/kubernetes-admission.md)."""

"""Who owns which job: in-process for the embedded default, etcd for a cluster."""

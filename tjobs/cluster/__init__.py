"""Who owns which job: the coordinator contract (:mod:`.base`), in-process for the embedded default
(:mod:`.local`), etcd for a cluster (:mod:`.etcd`); packing shards into job groups (:mod:`.plan`), per
database server health (:mod:`.db_health`), fencing a frozen former owner's sessions
(:mod:`.session_fence`), and the cluster-mode wiring (:mod:`.wiring`)."""

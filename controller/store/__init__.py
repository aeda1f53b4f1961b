"""The stores: where the jobs and the controller's small state survive a restart.

Owns the interface every store implements (`base`: the records, the errors,
`Store`), the check of every job record read back (`records`), the SQLite store of one instance (`sqlite`), the etcd store shared by
several instances (`etcd`), the factory that picks one from the config
(`factory`), and the leader election among instances on etcd (`election`).

May import `controller.algorithm` (the job model) and `controller.config` (the
store's settings); nothing above it. The core uses only `base.Store`.
"""

// Package flowcontrol tests the operator's API Priority and Fairness objects
// (the chart's FlowSchema and PriorityLevelConfiguration, docs/install.md)
// on a real kube-apiserver and etcd whose concurrency limits are small
// enough for a two-core machine to saturate them (build tag apf; make
// test-apf, about two minutes).
//
// A busy namespace, many service accounts writing and listing ConfigMaps as
// fast as they can, each write held up by the namespace's slow admission
// webhook (a policy engine under load), competes with the operator, which
// keeps many short FencedLeases held (renewed by its heartbeat, as
// cmd/manager runs it; APF_HEARTBEAT=0: each on its own Lease), hands one
// over, and answers the fencing webhook for holder pods that write
// protected ConfigMaps. The run has two phases on one
// control plane: first without the objects, the operator in workload-low
// through the built-in service-accounts FlowSchema beside the load, then
// with the objects as the chart renders them. Every request of the operator
// (its controller and, separately, its webhooks) is recorded with the
// FlowSchema and priority level the API server answers it was classified
// into (the X-Kubernetes-PF-FlowSchema-UID and -PriorityLevel-UID response
// headers).
//
// Asserted: in each phase, the load kept workload-low's queues busy, and
// every request of the operator was classified where the phase says (the
// service-accounts schema, then the chart's); with the chart's objects, the
// operator's Lease, FencedLease status, pod, pod status and Event writes and
// the webhooks' Lease reads are all among them, no held grant changed or
// expired, every holder write was admitted, and the holder invariants held
// throughout. Measured, never asserted: the operator's Lease write latency
// (the heartbeat's apart), the gaps between renewals of the heartbeat and of
// the FencedLeases' Leases as a watcher sees them, the operator's renewal
// lateness, the handoff time, the holders' write latency and the load's
// throughput, per phase; they go to the log and, as JSON, to $APF_OUT
// (docs/benchmarks.md, "API Priority and Fairness"). A phase lasts $APF_PHASE (30s by
// default); $APF_LEASES FencedLeases (100), $APF_LOAD_ACCOUNTS service
// accounts of $APF_LOAD_WORKERS workers each (48 of 4) make the load,
// $APF_LOAD_ADMISSION_DELAY is the webhook's delay (1s; 0 for none);
// APF_INSTALL=kustomize installs config/default's objects instead of the
// chart's.
package flowcontrol

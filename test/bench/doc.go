// Package bench measures failover side by side with client-go's leader
// election on one real kube-apiserver and etcd (build tag bench; make bench
// runs it through hack/bench): fencedlease with takeover Safe and Immediate
// against client-go candidates with its default timing, with
// ReleaseOnCancel, and tuned, for a graceful handover, a crash and a lost
// node, on two clocks (the new holder published, and the new holder's
// process knowing). The results go to $BENCH_OUT as JSON.
package bench

// Command kubectl-fence is a kubectl plugin for FencedLeases (kubectl fence):
//
//	kubectl fence status [NAME] [-n NAMESPACE | -A]
//	kubectl fence handoff NAME [--wait] [--timeout 2m]
//	kubectl fence explain-denial MESSAGE | configmap/NAME | secret/NAME
//
// status lists leases with their holders, fences, time to expiry and
// renewal mode, or tells the story of one. handoff asks the operator for a
// graceful rotation through the API: it sets the annotation
// fencedlease.io/handoff-requested-at, which the operator carries out once,
// like a maxHoldSeconds rotation (docs/design.md). explain-denial says why
// the fencing webhook rejected a write, from its message or from the
// protected object, and what to do.
//
// It loads the kubeconfig as kubectl does (--kubeconfig, $KUBECONFIG,
// ~/.kube/config) and takes kubectl's --context, --namespace/-n, --cluster,
// --user and --token.
package main

package policy

// Names of the policies and their bindings (each binding has its policy's
// name).
const (
	// OperatorState protects the operator-owned state; installed by default
	// (config/policy/operator-state.yaml).
	OperatorState = "fencedlease-operator-state"
	// PodBoundTokens lets only kubelets request service-account tokens bound
	// to a pod; opt-in (config/policy/optional/pod-bound-tokens.yaml).
	PodBoundTokens = "fencedlease-pod-bound-tokens"
)

package policy

// Names of the policies and their bindings as config/policy names them (each
// binding has its policy's name); installed, they carry the install's prefix
// like every object of config/: fencedlease-operator-state with
// config/default, <fullname>-operator-state with the chart.
const (
	// OperatorState protects the operator-owned state; installed by default
	// (config/policy/operator-state.yaml).
	OperatorState = "operator-state"
	// PodBoundTokens lets only kubelets request service-account tokens bound
	// to a pod; opt-in (config/policy/optional/pod-bound-tokens.yaml).
	PodBoundTokens = "pod-bound-tokens"
)

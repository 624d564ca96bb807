package install_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

const customValues = "test/install/testdata/custom-values.yaml"

func TestChartLints(t *testing.T) {
	for _, args := range [][]string{nil, {"-f", customValues}} {
		out, err := helm(t, append([]string{"lint", "--strict", chartDir}, args...)...)
		if err != nil {
			t.Fatalf("helm lint %v: %v", args, err)
		}
		NewWithT(t).Expect(out).To(ContainSubstring("1 chart(s) linted, 0 chart(s) failed"))
	}
}

// into converts a rendered object into its typed form.
func into[T any](t testing.TB, o *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &v); err != nil {
		t.Fatalf("convert %s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &v
}

// args returns the values of a flag among the container's arguments.
func args(c corev1.Container, flag string) []string {
	var out []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// checkReferences checks that the names the manager is given and the names
// its RBAC grants by resourceNames are those of rendered objects: a rename on
// one side only would leave an install that never becomes Ready, or whose
// operator is forbidden its own objects.
func checkReferences(t *testing.T, objs []*unstructured.Unstructured, prefix, ns string) {
	t.Helper()
	g := NewWithT(t)
	dep := into[appsv1.Deployment](t, find(t, objs, "Deployment", prefix+"-controller-manager"))
	g.Expect(dep.Namespace).To(Equal(ns))
	c := dep.Spec.Template.Spec.Containers[0]
	sa := find(t, objs, "ServiceAccount", dep.Spec.Template.Spec.ServiceAccountName)
	g.Expect(sa.GetNamespace()).To(Equal(ns))
	g.Expect(args(c, "operator-user")).To(Equal([]string{"system:serviceaccount:" + ns + ":" + sa.GetName()}))
	for _, s := range args(c, "webhook-service") {
		svc := into[corev1.Service](t, find(t, objs, "Service", s))
		g.Expect(svc.Spec.Selector).NotTo(BeEmpty())
		for k, v := range svc.Spec.Selector {
			g.Expect(dep.Spec.Template.Labels).To(HaveKeyWithValue(k, v), "the webhook Service selects the operator's pods")
		}
		g.Expect(svc.Spec.Ports[0].TargetPort.IntValue()).To(BeEquivalentTo(c.Ports[0].ContainerPort))
	}
	validating, mutating := args(c, "validating-webhook-configuration"), args(c, "mutating-webhook-configuration")
	var rendered []string
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingWebhookConfiguration":
			g.Expect(validating).To(ContainElement(o.GetName()), "the manager is not told of %s", o.GetName())
			rendered = append(rendered, o.GetName())
			for _, h := range into[admissionregistrationv1.ValidatingWebhookConfiguration](t, o).Webhooks {
				g.Expect(h.ClientConfig.Service.Name).To(Equal(args(c, "webhook-service")[0]), h.Name)
				g.Expect(h.ClientConfig.Service.Namespace).To(Equal(ns), h.Name)
				g.Expect(h.NamespaceSelector.MatchExpressions).To(ContainElement(HaveField("Values", ContainElement(ns))), "%s must not see the operator's own namespace", h.Name)
			}
		case "MutatingWebhookConfiguration":
			g.Expect(mutating).To(ContainElement(o.GetName()), "the manager is not told of %s", o.GetName())
			rendered = append(rendered, o.GetName())
			for _, h := range into[admissionregistrationv1.MutatingWebhookConfiguration](t, o).Webhooks {
				g.Expect(h.ClientConfig.Service.Name).To(Equal(args(c, "webhook-service")[0]), h.Name)
				g.Expect(h.ClientConfig.Service.Namespace).To(Equal(ns), h.Name)
				g.Expect(h.NamespaceSelector.MatchExpressions).To(ContainElement(HaveField("Values", ContainElement(ns))), "%s must not see the operator's own namespace", h.Name)
			}
		}
	}
	g.Expect(rendered).To(ConsistOf(append(validating, mutating...)))
	g.Expect(rendered).To(HaveLen(2))
	// The same two configurations get the webhooks' path token: a name the
	// operator does not find is skipped, and the API server would keep
	// calling a path that is not served.
	g.Expect(args(c, "fencing-webhook-configuration")).To(Equal(validating))
	g.Expect(args(c, "pod-webhook-configuration")).To(Equal(mutating))

	secret := args(c, "webhook-cert-secret")
	g.Expect(secret).To(HaveLen(1))
	// The Secret of the path token, which the operator creates in its own
	// namespace.
	tokenSecret := args(c, "webhook-token-secret")
	g.Expect(tokenSecret).To(HaveLen(1))
	tokenNS, token, _ := strings.Cut(tokenSecret[0], "/")
	g.Expect(tokenNS).To(Equal(ns))
	g.Expect(token).To(HavePrefix(prefix + "-"))
	for _, o := range objs {
		switch o.GetKind() {
		case "Role", "ClusterRole":
			for _, r := range into[rbacv1.Role](t, o).Rules {
				for _, res := range r.Resources {
					for _, n := range r.ResourceNames {
						switch res {
						case "secrets":
							g.Expect(o.GetKind()).To(Equal("Role"), "%s %s: Secrets of its own namespace only", o.GetKind(), o.GetName())
							g.Expect(o.GetNamespace()).To(Equal(ns), "%s %s", o.GetKind(), o.GetName())
							g.Expect(n).To(BeElementOf(secret[0], token), "%s %s", o.GetKind(), o.GetName())
						case "validatingwebhookconfigurations":
							g.Expect(validating).To(ContainElement(n), "%s %s", o.GetKind(), o.GetName())
						case "mutatingwebhookconfigurations":
							g.Expect(mutating).To(ContainElement(n), "%s %s", o.GetKind(), o.GetName())
						case "clusterroles":
							// The scale guard, the one ClusterRole the operator writes.
							g.Expect(n).To(Equal(prefix+"-scale-guard"), "%s %s", o.GetKind(), o.GetName())
							g.Expect(args(c, "scale-guard-role")).To(Equal([]string{n}))
							find(t, objs, "ClusterRole", n)
						default:
							t.Errorf("%s %s: unexpected resourceNames on %s", o.GetKind(), o.GetName(), res)
						}
					}
				}
			}
		case "RoleBinding", "ClusterRoleBinding":
			b := into[rbacv1.RoleBinding](t, o)
			find(t, objs, b.RoleRef.Kind, b.RoleRef.Name)
			subject := sa.GetName()
			if b.RoleRef.Name == prefix+"-scale-guard" {
				// The scale guard's service account, which runs nothing.
				subject = prefix + "-scale-guard"
				g.Expect(args(c, "scale-guard-service-account")).To(Equal([]string{ns + "/" + subject}))
			}
			for _, s := range b.Subjects {
				g.Expect(s).To(Equal(rbacv1.Subject{Kind: "ServiceAccount", Name: subject, Namespace: ns}), "%s %s", o.GetKind(), o.GetName())
			}
		case "ValidatingAdmissionPolicyBinding":
			b := into[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, o)
			find(t, objs, "ValidatingAdmissionPolicy", b.Spec.PolicyName)
		case "FlowSchema":
			// The operator's requests are classified by its service
			// account, into a priority level that is installed.
			fs := into[flowcontrolv1.FlowSchema](t, o)
			find(t, objs, "PriorityLevelConfiguration", fs.Spec.PriorityLevelConfiguration.Name)
			g.Expect(fs.Spec.Rules).NotTo(BeEmpty())
			for _, r := range fs.Spec.Rules {
				g.Expect(r.Subjects).To(Equal([]flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
					ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: sa.GetName(), Namespace: ns}}}), "FlowSchema %s", fs.Name)
			}
		case "ValidatingAdmissionPolicy":
			// The policy knows the operator by the name it runs as.
			for _, v := range into[admissionregistrationv1.ValidatingAdmissionPolicy](t, o).Spec.Variables {
				if v.Name == "operatorUsers" {
					g.Expect(v.Expression).To(Equal("['"+args(c, "operator-user")[0]+"']"), "%s %s", o.GetKind(), o.GetName())
				}
			}
		}
	}
}

// releaseRules are the rules of a generated role as an install must grant
// them: the webhook configurations and the scale guard's ClusterRole that
// resourceNames name (as config/ names them) by their installed names,
// prefix + "-" + name, and other names (the path token's Secret) as they
// are.
func releaseRules(rules []rbacv1.PolicyRule, prefix string) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		r = *r.DeepCopy()
		for _, res := range r.Resources {
			if strings.HasSuffix(res, "webhookconfigurations") || res == "clusterroles" {
				for i, n := range r.ResourceNames {
					r.ResourceNames[i] = prefix + "-" + n
				}
				break
			}
		}
		out = append(out, r)
	}
	return out
}

// TestChartDefaults: what the default values install.
func TestChartDefaults(t *testing.T) {
	g := NewWithT(t)
	objs := decode(t, renderChart(t, defaultRelease, defaultNamespace))
	checkReferences(t, objs, "fencedlease", defaultNamespace)

	dep := into[appsv1.Deployment](t, find(t, objs, "Deployment", "fencedlease-controller-manager"))
	g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(2))
	pod := dep.Spec.Template.Spec
	g.Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
	c := pod.Containers[0]
	g.Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
	g.Expect(c.SecurityContext.Capabilities.Drop).To(Equal([]corev1.Capability{"ALL"}))
	g.Expect(c.Resources.Requests).NotTo(BeEmpty())
	g.Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceMemory))
	g.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
	g.Expect(c.Env).To(ContainElement(HaveField("Name", "POD_NAMESPACE")))
	g.Expect(c.Env).To(ContainElement(And(HaveField("Name", "FENCEDLEASE_MEMORY_LIMIT"),
		HaveField("ValueFrom.ResourceFieldRef.Resource", "limits.memory"))), "the Go runtime's soft limit follows the container's")
	g.Expect(args(c, "webhook-cert-rotation")).To(Equal([]string{"true"}))
	g.Expect(args(c, "leader-elect")).To(BeEmpty())
	g.Expect(c.Args).To(ContainElement("--leader-elect"))
	g.Expect(pod.TopologySpreadConstraints).To(HaveLen(1))
	g.Expect(pod.TopologySpreadConstraints[0].TopologyKey).To(Equal("kubernetes.io/hostname"))
	// The certificate directory is writable although the root filesystem
	// is not.
	g.Expect(c.VolumeMounts).To(ContainElement(HaveField("MountPath", args(c, "webhook-cert-dir")[0])))

	pdb := find(t, objs, "PodDisruptionBudget", "fencedlease-controller-manager")
	g.Expect(pdb.Object["spec"]).To(HaveKeyWithValue("minAvailable", BeNumerically("==", 1)))

	// The operator's own certificate: an empty Secret, no cert-manager.
	secret := into[corev1.Secret](t, find(t, objs, "Secret", "fencedlease-webhook-cert"))
	g.Expect(secret.Data).To(BeEmpty())
	for _, o := range objs {
		g.Expect(o.GetAPIVersion()).NotTo(HavePrefix("cert-manager.io/"))
		g.Expect(o.GetAPIVersion()).NotTo(HavePrefix("monitoring.coreos.com/"))
		g.Expect(o.GetAnnotations()).NotTo(HaveKey("cert-manager.io/inject-ca-from"))
	}

	// The manager's rules are controller-gen's, not a copy by hand, but for
	// the names of the webhook configurations, which are the release's.
	role := into[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "fencedlease-manager-role"))
	generated := readRole(t, "config/rbac/role.yaml", "ClusterRole")
	g.Expect(role.Rules).To(Equal(releaseRules(generated.Rules, "fencedlease")))
	// And so are the rules for its own namespace: the path token's Secret.
	nsRole := into[rbacv1.Role](t, find(t, objs, "Role", "fencedlease-manager-role"))
	g.Expect(nsRole.Namespace).To(Equal(defaultNamespace))
	g.Expect(nsRole.Rules).To(Equal(readRole(t, "config/rbac/role.yaml", "Role").Rules))
	g.Expect(args(c, "webhook-token-secret")).To(Equal([]string{defaultNamespace + "/fencedlease-webhook-token"}))
	nsBinding := into[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", "fencedlease-manager-rolebinding"))
	g.Expect(nsBinding.Namespace).To(Equal(defaultNamespace))
	g.Expect(nsBinding.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fencedlease-manager-role"}))

	// The admission policy is installed; the opt-in one is not.
	find(t, objs, "ValidatingAdmissionPolicy", "fencedlease-operator-state")
	find(t, objs, "ValidatingAdmissionPolicyBinding", "fencedlease-operator-state")
	for _, o := range objs {
		g.Expect(o.GetName()).NotTo(HaveSuffix("pod-bound-tokens"), "policies.podBoundTokens.enabled is false")
	}

	workload := into[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "fencedlease-workload"))
	g.Expect(workload.Rules).To(Equal([]rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "watch", "update"}}}))

	crd := find(t, objs, "CustomResourceDefinition", "fencedleases.fencing.fencedlease.io")
	g.Expect(crd).NotTo(BeNil())

	// API Priority and Fairness: every request of the operator, in a level
	// of its own that lends nothing, matched after the built-in schemas
	// (the last of them, kube-system-service-accounts, at 900) and before
	// service-accounts (9000), which would put it into workload-low.
	fs := into[flowcontrolv1.FlowSchema](t, find(t, objs, "FlowSchema", "fencedlease-operator"))
	g.Expect(fs.Spec.MatchingPrecedence).To(BeNumerically("==", 1000))
	g.Expect(fs.Spec.PriorityLevelConfiguration.Name).To(Equal("fencedlease-operator"))
	g.Expect(fs.Spec.DistinguisherMethod).To(Equal(&flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType}))
	g.Expect(fs.Spec.Rules).To(HaveLen(1))
	g.Expect(fs.Spec.Rules[0].ResourceRules).To(Equal([]flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"},
		Resources: []string{"*"}, Namespaces: []string{"*"}, ClusterScope: true}}))
	g.Expect(fs.Spec.Rules[0].NonResourceRules).To(Equal([]flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}))
	pl := into[flowcontrolv1.PriorityLevelConfiguration](t, find(t, objs, "PriorityLevelConfiguration", "fencedlease-operator"))
	g.Expect(pl.Spec.Type).To(Equal(flowcontrolv1.PriorityLevelEnablementLimited))
	g.Expect(pl.Spec.Limited).To(Equal(&flowcontrolv1.LimitedPriorityLevelConfiguration{
		NominalConcurrencyShares: ptr.To[int32](10),
		LendablePercent:          ptr.To[int32](0),
		LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue,
			Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 16, HandSize: 4, QueueLengthLimit: 50}},
	}))
}

// TestChartWithoutPriorityAndFairness: apiPriorityAndFairness.enabled=false
// installs neither the FlowSchema nor the priority level, and nothing else
// changes.
func TestChartWithoutPriorityAndFairness(t *testing.T) {
	g := NewWithT(t)
	with := normalized(t, decode(t, renderChart(t, defaultRelease, defaultNamespace)))
	without := normalized(t, decode(t, renderChart(t, defaultRelease, defaultNamespace, "--set", "apiPriorityAndFairness.enabled=false")))
	g.Expect(with).To(HaveKey("FlowSchema//fencedlease-operator"))
	g.Expect(with).To(HaveKey("PriorityLevelConfiguration//fencedlease-operator"))
	delete(with, "FlowSchema//fencedlease-operator")
	delete(with, "PriorityLevelConfiguration//fencedlease-operator")
	g.Expect(without).To(Equal(with))
}

// TestChartInAnotherNamespace: names and namespaces follow the release.
func TestChartInAnotherNamespace(t *testing.T) {
	g := NewWithT(t)
	objs := decode(t, renderChart(t, "acme", "ops"))
	checkReferences(t, objs, "acme-fencedlease", "ops")
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			g.Expect(o.GetName()).To(HavePrefix("acme-fencedlease-"), "%s %s", o.GetKind(), o.GetName())
		}
		if o.GetNamespace() != "" {
			g.Expect(o.GetNamespace()).To(Equal("ops"), "%s %s", o.GetKind(), o.GetName())
		}
	}
}

// TestChartCustomValues: every option away from its default.
func TestChartCustomValues(t *testing.T) {
	g := NewWithT(t)
	const ns = "platform"
	objs := decode(t, renderChart(t, defaultRelease, ns, "-f", customValues))
	checkReferences(t, objs, "fencedlease", ns)

	dep := into[appsv1.Deployment](t, find(t, objs, "Deployment", "fencedlease-controller-manager"))
	g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(3))
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	g.Expect(c.Image).To(Equal("registry.example/platform/fencedlease:v9.9.9"))
	g.Expect(c.ImagePullPolicy).To(Equal(corev1.PullAlways))
	g.Expect(pod.ImagePullSecrets).To(Equal([]corev1.LocalObjectReference{{Name: "registry-credentials"}}))
	g.Expect(pod.PriorityClassName).To(Equal("system-cluster-critical"))
	g.Expect(pod.NodeSelector).To(Equal(map[string]string{"kubernetes.io/os": "linux"}))
	g.Expect(pod.Tolerations).To(HaveLen(1))
	g.Expect(pod.Affinity.NodeAffinity).NotTo(BeNil())
	g.Expect(pod.TopologySpreadConstraints).To(HaveLen(1))
	g.Expect(pod.TopologySpreadConstraints[0].TopologyKey).To(Equal("topology.kubernetes.io/zone"))
	g.Expect(dep.Spec.Template.Labels).To(HaveKeyWithValue("team", "platform"))
	g.Expect(dep.Spec.Template.Annotations).To(HaveKeyWithValue("example.com/scrape", "true"))
	g.Expect(c.Args).To(ContainElements("--webhook-port=10443", "--metrics-bind-address=:9090", "--zap-log-level=debug",
		"--break-glass-user=alice", "--break-glass-group=sre:break-glass", "--webhook-cert-rotation=false"))
	g.Expect(c.Ports).To(ContainElement(HaveField("ContainerPort", BeEquivalentTo(10443))))
	g.Expect(c.Resources.Limits.Cpu().String()).To(Equal("1"))
	g.Expect(find(t, objs, "ServiceAccount", "fencedlease-controller-manager").GetAnnotations()).To(HaveKeyWithValue("example.com/owner", "platform"))

	pdb := find(t, objs, "PodDisruptionBudget", "fencedlease-controller-manager")
	g.Expect(pdb.Object["spec"]).To(HaveKeyWithValue("minAvailable", "50%"))

	// cert-manager issues the certificate and injects the CA; the operator
	// only reads its one Secret and writes no webhook configuration.
	cert := find(t, objs, "Certificate", "fencedlease-serving-cert")
	g.Expect(cert.Object["spec"]).To(HaveKeyWithValue("secretName", "fencedlease-webhook-cert"))
	g.Expect(cert.Object["spec"]).To(HaveKeyWithValue("issuerRef", map[string]any{"kind": "ClusterIssuer", "name": "internal-ca", "group": "cert-manager.io"}))
	g.Expect(cert.Object["spec"]).To(HaveKeyWithValue("dnsNames", ConsistOf("fencedlease-webhook-service.platform.svc", "fencedlease-webhook-service.platform.svc.cluster.local")))
	for _, o := range objs {
		g.Expect(o.GetKind()).NotTo(Equal("Issuer"), "no self-signed Issuer when an issuer is given")
		g.Expect(o.GetKind() == "Secret" && o.GetName() == "fencedlease-webhook-cert").To(BeFalse(), "cert-manager creates the Secret")
		if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
			g.Expect(o.GetAnnotations()).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", "platform/fencedlease-serving-cert"))
		}
	}
	certRole := into[rbacv1.Role](t, find(t, objs, "Role", "fencedlease-webhook-cert"))
	g.Expect(certRole.Rules).To(Equal([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"fencedlease-webhook-cert"}, Verbs: []string{"get", "list", "watch"}}}))
	for _, r := range into[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "fencedlease-webhook-config")).Rules {
		g.Expect(r.Verbs).NotTo(ContainElement("update"))
		g.Expect(r.ResourceNames).NotTo(BeEmpty())
	}

	for _, o := range objs {
		if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
			for _, h := range o.Object["webhooks"].([]any) {
				sel, _ := yaml.Marshal(h.(map[string]any)["namespaceSelector"])
				g.Expect(string(sel)).To(ContainSubstring("- monitoring\n"))
				g.Expect(string(sel)).To(ContainSubstring("- kube-public\n"))
			}
		}
	}
	sm := find(t, objs, "ServiceMonitor", "fencedlease-controller-manager")
	g.Expect(sm.GetLabels()).To(HaveKeyWithValue("release", "prometheus"))
	metrics := into[corev1.Service](t, find(t, objs, "Service", "fencedlease-metrics-service"))
	g.Expect(metrics.Spec.Ports[0].Port).To(BeEquivalentTo(9090))
	for _, o := range objs {
		g.Expect(o.GetName()).NotTo(Equal("fencedlease-workload"), "workloadRole.create=false")
	}

	// The policy lets the break-glass principals of the values delete an
	// owned Lease, as the webhook lets them write protected objects.
	vap := into[admissionregistrationv1.ValidatingAdmissionPolicy](t, find(t, objs, "ValidatingAdmissionPolicy", "fencedlease-operator-state"))
	vars := map[string]string{}
	for _, v := range vap.Spec.Variables {
		vars[v.Name] = v.Expression
	}
	g.Expect(vars).To(HaveKeyWithValue("breakGlassUsers", "['alice']"))
	g.Expect(vars).To(HaveKeyWithValue("breakGlassGroups", "['sre:break-glass']"))
	// The opt-in policy, named and bound as the release's.
	find(t, objs, "ValidatingAdmissionPolicy", "fencedlease-pod-bound-tokens")
	binding := into[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, find(t, objs, "ValidatingAdmissionPolicyBinding", "fencedlease-pod-bound-tokens"))
	g.Expect(binding.Spec.PolicyName).To(Equal("fencedlease-pod-bound-tokens"))
	g.Expect(binding.Spec.ValidationActions).To(Equal([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}))

	// The priority level and the FlowSchema as tuned.
	fs := into[flowcontrolv1.FlowSchema](t, find(t, objs, "FlowSchema", "fencedlease-operator"))
	g.Expect(fs.Spec.MatchingPrecedence).To(BeNumerically("==", 2000))
	pl := into[flowcontrolv1.PriorityLevelConfiguration](t, find(t, objs, "PriorityLevelConfiguration", "fencedlease-operator"))
	g.Expect(pl.Spec.Limited).To(Equal(&flowcontrolv1.LimitedPriorityLevelConfiguration{
		NominalConcurrencyShares: ptr.To[int32](30),
		LendablePercent:          ptr.To[int32](25),
		BorrowingLimitPercent:    ptr.To[int32](100),
		LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue,
			Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 32, HandSize: 6, QueueLengthLimit: 100}},
	}))
}

// TestChartHelmTestHook: the test hook runs in tests.namespace, as a
// candidate of its own FencedLease, with the token files injected.
func TestChartHelmTestHook(t *testing.T) {
	g := NewWithT(t)
	out, err := helm(t, "template", defaultRelease, chartDir, "--namespace", defaultNamespace, "-f", customValues, "--show-only", "templates/tests/test-holder.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	objs := decode(t, out)
	fl := find(t, objs, "FencedLease", "fencedlease-test")
	pod := into[corev1.Pod](t, find(t, objs, "Pod", "fencedlease-test"))
	g.Expect(fl.GetNamespace()).To(Equal("fencedlease-smoke"))
	g.Expect(pod.Namespace).To(Equal("fencedlease-smoke"))
	g.Expect(pod.Annotations).To(HaveKeyWithValue("helm.sh/hook", "test"))
	g.Expect(pod.Labels).To(HaveKeyWithValue("fencedlease.io/inject", "true"))
	sel := fl.Object["spec"].(map[string]any)["selector"].(map[string]any)["matchLabels"].(map[string]any)
	for k, v := range sel {
		g.Expect(pod.Labels).To(HaveKeyWithValue(k, v))
	}
	g.Expect(pod.Spec.Containers[0].Image).To(Equal("registry.example/platform/fencedlease:v9.9.9"))
	g.Expect(image.files).To(HaveKey(pod.Spec.Containers[0].Command[0]))
}

// TestValuesSchemaRejectsBadValues: a bad value fails the render with a
// message that names it.
func TestValuesSchemaRejectsBadValues(t *testing.T) {
	const head = "Error: values don't meet the specifications of the schema(s) in the following chart(s):\nfencedlease:\n"
	for _, tc := range []struct {
		set, want string
	}{
		{"replicaCount=0", head + "- at '/replicaCount': minimum: got 0, want 1"},
		{"replicaCount=two", head + "- at '/replicaCount': got string, want integer"},
		{"image.repository=", head + "- at '/image/repository': minLength: got 0, want 1"},
		{"image.pullPolicy=Sometimes", head + "- at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"},
		{"webhooks.port=443", head + "- at '/webhooks/port': minimum: got 443, want 1,024"},
		{"webhooks.excludeNamespaces[0]=Bad_NS", head + "- at '/webhooks/excludeNamespaces/0': 'Bad_NS' does not match pattern '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'"},
		{"certManager.enabled=yes", head + "- at '/certManager/enabled': got string, want boolean"},
		{"certManager.issuerRef.kind=ClusterIssuer", head + "- at '/certManager/issuerRef': properties 'name' required, if 'kind' exists"},
		{"metrics.serviceMonitor.interval=often", head + "- at '/metrics/serviceMonitor/interval': 'often' does not match pattern '^[0-9]+(ms|s|m|h)$'"},
		{"statusRenewalInterval=often", head + "- at '/statusRenewalInterval': 'often' does not match pattern '^[0-9]+(ms|s|m|h)$'"},
		{"replicas=2", head + "- at '': additional properties 'replicas' not allowed"},
		{"webhooks.protectedResources[0].apiGroup=apps,webhooks.protectedResources[0].resources[0]=deployments/exec",
			head + "- at '/webhooks/protectedResources/0/resources/0': 'deployments/exec' does not match pattern '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/(status|scale))?$'"},
		{"apiPriorityAndFairness.matchingPrecedence=9000", head + "- at '/apiPriorityAndFairness/matchingPrecedence': maximum: got 9,000, want 8,999"},
		{"apiPriorityAndFairness.matchingPrecedence=900", head + "- at '/apiPriorityAndFairness/matchingPrecedence': minimum: got 900, want 901"},
		{"apiPriorityAndFairness.nominalConcurrencyShares=0", head + "- at '/apiPriorityAndFairness/nominalConcurrencyShares': minimum: got 0, want 1"},
		{"apiPriorityAndFairness.lendablePercent=101", head + "- at '/apiPriorityAndFairness/lendablePercent': maximum: got 101, want 100"},
		{"apiPriorityAndFairness.queuing.handSize=0", head + "- at '/apiPriorityAndFairness/queuing/handSize': minimum: got 0, want 1"},
		{"gateway.routes[0].bucket=abc,gateway.routes[0].namespace=ns,gateway.routes[0].fencedLease=a,gateway.routes[0].fencedShardSet=b",
			head + "- at '/gateway/routes/0': 'oneOf' failed, subschemas 0, 1 matched"},
		{"gateway.routes[0].bucket=abc,gateway.routes[0].namespace=ns", head + "- at '/gateway/routes/0': 'oneOf' failed, none matched"},
		{"podDisruptionBudget.minAvailable=2", "Error: execution error at (fencedlease/templates/pdb.yaml:4:4): podDisruptionBudget.minAvailable (2) must be less than replicaCount (2): otherwise no replica could ever be evicted, and node drains would block"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			g := NewWithT(t)
			_, err := helm(t, "template", defaultRelease, chartDir, "--set", tc.set)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring(tc.want + "\n"))
		})
	}
}

// TestChartAndConfigDefaultInstallTheSameObjects: the two install paths
// are one set of facts. With release "fencedlease" in "fencedlease-system",
// the chart renders the objects config/default does, field for field, but
// for their labels and the labels that select the operator's pods, and the
// Namespace, which helm does not create.
func TestChartAndConfigDefaultInstallTheSameObjects(t *testing.T) {
	g := NewWithT(t)
	chart := normalized(t, decode(t, renderChart(t, defaultRelease, defaultNamespace)))
	kust := normalized(t, decode(t, renderKustomize(t)))
	g.Expect(kust).To(HaveKey("Namespace//fencedlease-system"))
	delete(kust, "Namespace//fencedlease-system")
	g.Expect(keys(chart)).To(Equal(keys(kust)))
	for k, c := range chart {
		cy, _ := yaml.Marshal(c)
		ky, _ := yaml.Marshal(kust[k])
		g.Expect(strings.Split(string(cy), "\n")).To(Equal(strings.Split(string(ky), "\n")), "%s differs between the chart and config/default", k)
	}
}

// normalized keys objects by kind, namespace and name, without labels.
func normalized(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		o = o.DeepCopy()
		o.SetLabels(nil)
		for _, path := range [][]string{
			{"spec", "selector"}, {"spec", "template", "metadata", "labels"},
		} {
			unstructured.RemoveNestedField(o.Object, path...)
		}
		if tsc, ok, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "topologySpreadConstraints"); ok {
			for _, c := range tsc {
				delete(c.(map[string]any), "labelSelector")
			}
			_ = unstructured.SetNestedSlice(o.Object, tsc, "spec", "template", "spec", "topologySpreadConstraints")
		}
		if len(o.GetAnnotations()) == 0 {
			o.SetAnnotations(nil)
		}
		if md, ok := o.Object["metadata"].(map[string]any); ok && len(md) == 0 {
			delete(o.Object, "metadata")
		}
		out[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o.Object
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readRole reads the one object of the kind (ClusterRole or Role) in the
// file.
func readRole(t *testing.T, path, kind string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(repoPath(path))
	if err != nil {
		t.Fatal(err)
	}
	var found []*rbacv1.ClusterRole
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		var r rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if r.Kind == kind {
			found = append(found, &r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d objects of kind %s, want one", path, len(found), kind)
	}
	return found[0]
}

// TestChartCopiesOfConfig: the chart reads exact copies of config/ (make
// manifests writes them; make verify fails on a difference, and so does
// this test when only go test runs).
func TestChartCopiesOfConfig(t *testing.T) {
	g := NewWithT(t)
	same := func(src, dst string) {
		a, err := os.ReadFile(repoPath(src))
		g.Expect(err).NotTo(HaveOccurred())
		b, err := os.ReadFile(repoPath(dst))
		g.Expect(err).NotTo(HaveOccurred(), "%s has no copy in the chart: run make manifests", src)
		g.Expect(bytes.Equal(a, b)).To(BeTrue(), "%s differs from %s: run make manifests", dst, src)
	}
	// files lists the files under dir, subdirectories included, by their
	// paths relative to dir.
	files := func(dir string, keep func(string) bool) []string {
		var out []string
		err := filepath.WalkDir(repoPath(dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(repoPath(dir), path)
			if err == nil && keep(rel) {
				out = append(out, rel)
			}
			return err
		})
		if os.IsNotExist(err) {
			return nil
		}
		g.Expect(err).NotTo(HaveOccurred())
		return out
	}
	list := func(dir string, keep func(string) bool) []string {
		entries, err := os.ReadDir(repoPath(dir))
		if os.IsNotExist(err) {
			return nil
		}
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, e := range entries {
			if keep(e.Name()) {
				out = append(out, e.Name())
			}
		}
		return out
	}
	all := func(string) bool { return true }
	crds := list("config/crd/bases", all)
	g.Expect(crds).NotTo(BeEmpty())
	g.Expect(list(chartDir+"/crds", all)).To(Equal(crds))
	for _, f := range crds {
		same(filepath.Join("config/crd/bases", f), filepath.Join(chartDir, "crds", f))
	}
	for _, f := range []string{"role.yaml", "leader_election_role.yaml", "metrics_reader_role.yaml"} {
		same(filepath.Join("config/rbac", f), filepath.Join(chartDir, "files/rbac", f))
	}
	hooks := list("config/webhook", func(name string) bool {
		data, err := os.ReadFile(repoPath("config/webhook", name))
		g.Expect(err).NotTo(HaveOccurred())
		return strings.Contains(string(data), "\nkind: ValidatingWebhookConfiguration\n") || strings.Contains(string(data), "\nkind: MutatingWebhookConfiguration\n")
	})
	g.Expect(hooks).NotTo(BeEmpty())
	g.Expect(list(chartDir+"/files/webhook", all)).To(Equal(hooks))
	for _, f := range hooks {
		same(filepath.Join("config/webhook", f), filepath.Join(chartDir, "files/webhook", f))
	}
	// The policies installed by default and the opt-in ones (optional/).
	policies := files("config/policy", func(name string) bool { return filepath.Base(name) != "kustomization.yaml" })
	g.Expect(policies).To(ContainElement(filepath.Join("optional", "pod-bound-tokens.yaml")))
	g.Expect(files(chartDir+"/files/policy", all)).To(Equal(policies))
	for _, f := range policies {
		same(filepath.Join("config/policy", f), filepath.Join(chartDir, "files/policy", f))
	}
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/cluster"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

// replicaFlags are added to the Deployment's container args: a Widget is
// reconciled twice a second (the manifest's 10 s would leave the replicas
// idle), the paused replica writes on once resumed, no listeners, and log
// times precise enough to tell the writes apart.
var replicaFlags = []string{"--resync=500ms", "--late-writes=" + lateWrites.String(),
	"--health-probe-bind-address=0", "--metrics-bind-address=0", "--zap-time-encoding=rfc3339nano"}

// removeEarlier deletes the namespaces of earlier runs of this scene (in
// the background).
func (cd *ctrlDemo) removeEarlier() error {
	old := &corev1.NamespaceList{}
	if err := cd.w.List(cd.ctx, old, client.MatchingLabels{demoLabel: ctrlDemoLabelValue}); err != nil {
		return err
	}
	for i := range old.Items {
		if old.Items[i].DeletionTimestamp == nil {
			if err := cd.w.Delete(cd.ctx, &old.Items[i]); err != nil {
				return fmt.Errorf("delete namespace %s of an earlier run: %w", old.Items[i].Name, err)
			}
		}
	}
	return nil
}

func (cd *ctrlDemo) namespace(prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: map[string]string{demoLabel: ctrlDemoLabelValue}}}
	if err := cd.w.Create(cd.ctx, ns); err != nil {
		return "", fmt.Errorf("create a namespace: %w", err)
	}
	cd.namespaces = append(cd.namespaces, ns.Name)
	return ns.Name, nil
}

// applyManifest creates the objects of the example's deploy manifest in
// ns. fenced keeps its FencedLease, with the demo's lease duration; without
// it the replicas use client-go's leader election: no FencedLease, no
// binding to its Lease, --leader-elect for --fenced-lease, and the Role
// that election needs.
func (cd *ctrlDemo) applyManifest(ns string, fenced bool) error {
	objs, err := readObjects(filepath.Join(cd.config, "deploy", "widget-controller.yaml"))
	if err != nil {
		return err
	}
	for _, u := range objs {
		u.SetNamespace(ns)
		switch u.GetKind() {
		case "FencedLease":
			if !fenced {
				continue
			}
			if err := unstructured.SetNestedField(u.Object, int64(ctrlLeaseSeconds), "spec", "leaseDurationSeconds"); err != nil {
				return err
			}
			if err := unstructured.SetNestedField(u.Object, int64(1), "spec", "renewIntervalSeconds"); err != nil {
				return err
			}
		case "RoleBinding":
			if ref, _, _ := unstructured.NestedString(u.Object, "roleRef", "name"); ref == release+"-workload" && !fenced {
				continue
			}
		case "Deployment":
			if !fenced {
				if err := leaderElect(u); err != nil {
					return err
				}
			}
		}
		if err := cd.w.Create(cd.ctx, u); err != nil {
			return fmt.Errorf("create %s %s/%s: %w", u.GetKind(), ns, u.GetName(), err)
		}
	}
	if fenced {
		return nil
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leader-election"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		}}
	if err := cd.w.Create(cd.ctx, role); err != nil {
		return err
	}
	return cd.w.Create(cd.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leader-election"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: widgetLease}},
	})
}

// leaderElect swaps the Deployment's --fenced-lease for --leader-elect.
func leaderElect(u *unstructured.Unstructured) error {
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return fmt.Errorf("the containers of Deployment %s: %w", u.GetName(), err)
	}
	if len(containers) == 0 {
		return fmt.Errorf("deployment %s of the manifest has no containers", u.GetName())
	}
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	args = slices.DeleteFunc(args, func(a string) bool { return strings.HasPrefix(a, "--fenced-lease") })
	if err := unstructured.SetNestedStringSlice(c, append(args, "--leader-elect"), "args"); err != nil {
		return err
	}
	containers[0] = c
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

func readObjects(file string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := d.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// startReplicas waits for the Deployment's two pods to run and starts a
// replica process for each, with the Deployment's container args.
func (cd *ctrlDemo) startReplicas(ns string) (map[string]*cluster.PodProcess, error) {
	dep := &appsv1.Deployment{}
	if err := cd.w.Get(cd.ctx, client.ObjectKey{Namespace: ns, Name: widgetLease}, dep); err != nil {
		return nil, err
	}
	pods, err := cd.runningPods(ns, int(*dep.Spec.Replicas), time.Minute)
	if err != nil {
		return nil, err
	}
	args := append(slices.Clone(dep.Spec.Template.Spec.Containers[0].Args), replicaFlags...)
	out := map[string]*cluster.PodProcess{}
	var where []string
	for i := range pods {
		p, err := cd.cl.StartPodProcess(cd.ctx, pods[i].Name, &pods[i], cd.example, args...)
		if err != nil {
			return nil, err
		}
		cd.replicas = append(cd.replicas, p)
		out[p.Name] = p
		where = append(where, fmt.Sprintf("%s (on %s)", p.Name, pods[i].Spec.NodeName))
	}
	cd.say("Pods %s run, played by kwok.", strings.Join(where, " and "))
	cd.say("A replica process for each: %s %s (the Deployment's args)", rel(cd.example), strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "))
	explain("%s", strings.Join(replicaFlags, " "))
	explain("Each acts as its pod: KUBECONFIG=%s holds a token that the", rel(filepath.Join(cd.cl.Dir, "pods", "<pod>", "kubeconfig")))
	explain("TokenRequest API bound to the pod; POD_NAME and POD_NAMESPACE are set as the downward API sets them.")
	explain("Their logs: %s", rel(filepath.Join(cd.cl.Dir, "logs", "<pod>.log")))
	return out, nil
}

// runningPods waits for n Ready pods of the Deployment.
func (cd *ctrlDemo) runningPods(ns string, n int, timeout time.Duration) ([]corev1.Pod, error) {
	deadline := time.Now().Add(timeout)
	for {
		list := &corev1.PodList{}
		if err := cd.w.List(cd.ctx, list, client.InNamespace(ns), client.MatchingLabels{"app": widgetLease}); err != nil {
			return nil, err
		}
		ready := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil || !podReady(&p) })
		if len(ready) >= n {
			slices.SortFunc(ready, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
			return ready[:n], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d pods of Deployment %s/%s are Ready after %s", len(ready), n, ns, widgetLease, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// createWidgets creates the Widgets w0, w1… unlabelled: the controller
// protects them in its first write.
func (cd *ctrlDemo) createWidgets(ns string) error {
	var names []string
	for i := range widgetCount {
		w := &examplesv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("w%d", i)},
			Spec: examplesv1alpha1.WidgetSpec{Message: "hello"}}
		if err := cd.w.Create(cd.ctx, w); err != nil {
			return fmt.Errorf("create Widget %s/%s: %w", ns, w.Name, err)
		}
		names = append(names, w.Name)
	}
	cd.say("Widgets %s created; the controller that acts gives each a slot (unique in the namespace) and writes its status.", strings.Join(names, ", "))
	return nil
}

// scaleDown scales the Deployments to zero once their processes are
// stopped: pods with no process behind them would pass the grant between
// them every few seconds, with nobody to renew it.
func (cd *ctrlDemo) scaleDown() error {
	for _, ns := range cd.namespaces {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: widgetLease}}
		err := cd.w.Patch(cd.ctx, dep, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`)))
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("scale Deployment %s/%s to zero: %w", ns, widgetLease, err)
		}
	}
	return nil
}

// other is the replica that is not name.
func other(replicas map[string]*cluster.PodProcess, name string) *cluster.PodProcess {
	for n, p := range replicas {
		if n != name {
			return p
		}
	}
	return nil
}

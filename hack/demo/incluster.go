package main

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/cluster"
)

// installInCluster installs the chart with the operator's image on the
// real nodes and waits until it leads. A local operator of an earlier demo
// is stopped first.
func (d *demo) installInCluster(o options) error {
	if err := d.cl.StopOperator("demo"); err != nil {
		return err
	}
	t0 := time.Now()
	// One operator pod on each real node: the scene that stops a node's
	// kubelet leaves the other's webhook endpoint Ready.
	spread := fmt.Sprintf(`topologySpreadConstraints=[{"maxSkew":1,"topologyKey":%q,"whenUnsatisfiable":"DoNotSchedule",`+
		`"labelSelector":{"matchLabels":{"app.kubernetes.io/name":"fencedlease","app.kubernetes.io/instance":%q}}}]`, corev1.LabelHostname, release)
	in, err := d.cl.InstallChartInCluster(d.ctx, o.helm, o.chart, release, namespace, "--set-json", spread)
	if err != nil {
		return err
	}
	d.install = in
	d.say("helm upgrade --install %s %s --namespace %s --wait (%.1fs), with", release, rel(o.chart), namespace, time.Since(t0).Seconds())
	explain("%s", strings.Join(quote(cluster.InClusterValues), " "))
	pods, err := d.operatorPods()
	if err != nil {
		return err
	}
	for _, p := range pods {
		d.say("Operator pod %s on %s, address %s, image %s: Ready.", p.Name, p.Spec.NodeName, p.Status.PodIP, p.Spec.Containers[0].Image)
	}
	explain("The API server calls the webhooks through their Service (its endpoints: the pods' addresses), with the")
	explain("certificate the operator provisions and the CA bundle it injects into the webhook configurations.")
	deadline := time.Now().Add(time.Minute)
	for {
		h, err := d.operatorLeader(namespace)
		if err != nil {
			return err
		}
		name, _, _ := strings.Cut(h, "_")
		for _, p := range pods {
			if p.Name == name {
				d.say("%s leads (Lease %s/%s): it runs the controller; both serve the webhooks.", name, namespace, operatorLock)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no operator pod took the leader-election Lease %s/%s in a minute (holder %q)", namespace, operatorLock, h)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// operatorPods are the operator's pods that are not being deleted.
func (d *demo) operatorPods() ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := d.c.List(d.ctx, pods, client.InNamespace(namespace), client.MatchingLabels(d.install.Deployment.Spec.Selector.MatchLabels)); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// operatorLog is the end of an operator pod's log, read from its node: the
// API server cannot reach the kubelets for kubectl logs.
func (d *demo) operatorLog(lines int) string {
	if d.install == nil {
		return ""
	}
	pods, err := d.operatorPods()
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i := range pods {
		p := &pods[i]
		log, err := d.cl.ContainerLog(p.Spec.NodeName, p, p.Spec.Containers[0].Name)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", p.Name, err)
			continue
		}
		all := strings.Split(strings.TrimSpace(log), "\n")
		fmt.Fprintf(&b, "--- %s\n%s\n", p.Name, strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
	return b.String()
}

// processLog is what the workload's process in pod has written so far.
func (d *demo) processLog(pod *corev1.Pod) (string, error) {
	return d.cl.ContainerLog(pod.Spec.NodeName, pod, app)
}

// processSays waits until the workload's process in pod has written want,
// and prints the line. The kubelet removes a container's log with the
// container: what was read is kept.
func (d *demo) processSays(pod *corev1.Pod, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		log, err := d.processLog(pod)
		if err == nil {
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, want) {
					d.say("%s's process: %q", pod.Name, want)
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("the process of pod %s did not write %q in %s: %w", pod.Name, want, timeout, err)
			}
			return fmt.Errorf("the process of pod %s did not write %q in %s (its last line: %q)", pod.Name, want, timeout, lastLine(log))
		}
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lastLine is the last line of a container's log.
func lastLine(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	return lines[len(lines)-1]
}

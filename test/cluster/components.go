package cluster

import (
	"fmt"
	"path/filepath"
)

// addresses are where etcd and the API server listen.
type addresses struct {
	etcd, peer, server string
	port               int
}

func (c *Cluster) etcdProcess(a addresses) process {
	return process{name: etcd, bin: filepath.Join(c.K8sBin, etcd), args: []string{
		"--name=local", "--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + a.etcd, "--advertise-client-urls=" + a.etcd,
		"--listen-peer-urls=" + a.peer, "--initial-advertise-peer-urls=" + a.peer,
		"--initial-cluster=local=" + a.peer,
		// A disposable cluster: speed over durability.
		"--unsafe-no-fsync=true",
	}}
}

// apiServerProcess is an API server named name on port, whose storage is
// the etcd members at etcdServers (comma-separated client URLs).
func (c *Cluster) apiServerProcess(name, etcdServers string, port int, p *pki) process {
	proc := process{name: name, bin: filepath.Join(c.K8sBin, apiServer), args: []string{
		"--etcd-servers=" + etcdServers,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(c.Dir, "pki"),
		"--tls-cert-file=" + p.path("apiserver.crt"), "--tls-private-key-file=" + p.path("apiserver.key"),
		"--client-ca-file=" + p.path("ca.crt"),
		// Bound service-account tokens: the TokenRequest API signs with
		// this key, and puts the pod's name and UID into the token.
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.path("sa.pub"),
		"--service-account-signing-key-file=" + p.path("sa.key"),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + c.net.serviceRange(),
		// Webhooks and aggregated APIs are called at their Service's
		// endpoints: no kube-proxy routes a Service's address here.
		"--enable-aggregator-routing=true",
		"--allow-privileged=true",
		// The kubernetes Service would get 127.0.0.1 as its endpoint,
		// which Endpoints refuse.
		"--endpoint-reconciler-type=none",
	}}
	if c.ControlPlaneOnly {
		// As envtest: no controller manager creates the namespaces'
		// default ServiceAccounts, which this plugin requires of pods.
		proc.args = append(proc.args, "--disable-admission-plugins=ServiceAccount")
	}
	if c.HA {
		// Stopped (SIGTERM), it answers new requests with 429 and
		// Retry-After until those in flight have drained, then ends its
		// connections within 2 s, as behind a load balancer; by default it
		// would keep its watches up to a minute.
		proc.args = append(proc.args, "--shutdown-send-retry-after=true")
	}
	return proc
}

func (c *Cluster) controllerManagerProcess(p *pki) process {
	return process{name: controllerManager, bin: filepath.Join(c.K8sBin, controllerManager), args: []string{
		"--kubeconfig=" + c.componentKubeconfig(controllerManager),
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
		// The legacy token controller needs the signing key and makes
		// Secrets nobody here uses; pods get bound tokens.
		"--controllers=*,-serviceaccount-token",
		"--root-ca-file=" + p.path("ca.crt"),
		"--node-monitor-grace-period=" + c.NodeMonitorGracePeriod.String(),
		"--node-monitor-period=2s",
	}}
}

func (c *Cluster) schedulerProcess() process {
	return process{name: scheduler, bin: filepath.Join(c.K8sBin, scheduler), args: []string{
		"--kubeconfig=" + c.componentKubeconfig(scheduler), "--leader-elect=false", "--secure-port=0",
	}}
}

func (c *Cluster) kwokProcess(stagesFile string) process {
	return process{name: kwok, bin: c.Kwok, args: []string{
		"--kubeconfig=" + c.componentKubeconfig(kwok),
		"--config=" + stagesFile,
		// kwok plays the simulated nodes alone, never the real ones.
		"--manage-nodes-with-label-selector=type=kwok",
		fmt.Sprintf("--node-lease-duration-seconds=%d", nodeLeaseSeconds),
		"--cidr=10.244.0.0/16",
	}}
}

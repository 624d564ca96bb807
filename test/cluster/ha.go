package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// The HA control plane: three etcd members that form one etcd cluster (peer
// URLs on loopback), two API servers whose storage is all three members,
// and the balancer in front of the API servers, as a load balancer would be.
// The administrator's kubeconfig reaches the API servers through the
// balancer.
//
// An attached cluster (a test's) also puts a proxy in front of each API
// server, so that a client can be pointed at one of them
// (APIServerConfig) and the network to one of them can be cut for everyone
// (CutAPIServer). A detached one (make cluster HA=1) runs the balancer as a
// process of its own (hack/cluster balance).
const (
	etcdMembers = 3
	apiServers  = 2
	etcdctl     = "etcdctl"
	etcdutl     = "etcdutl"
	// haMarker is the file in the state directory that says the cluster
	// there was started HA.
	haMarker = "ha"
	// etcdClusterToken tells this etcd cluster's members from others'.
	etcdClusterToken = "fencedlease-local"
)

func memberName(i int) string { return fmt.Sprintf("%s-%d", etcd, i) }

func serverName(i int) string { return fmt.Sprintf("%s-%d", apiServer, i) }

// member is one etcd member: its name and URLs.
type member struct{ name, client, peer string }

// haPlane is the running HA control plane of a cluster.
type haPlane struct {
	members []member
	// ports are the API servers' ports.
	ports []int
	// fronts are the proxies in front of each API server, lb the balancer
	// in front of both (attached clusters; a detached one runs the
	// balancer as a process at lbAddr).
	fronts []*Balancer
	lb     *Balancer
	lbAddr string
	// extra are more balancers in front of the API servers
	// (NewAPIBalancer), cut and healed with the others.
	extra []*Balancer
	// store is the etcd client of FollowStorage, made when first needed.
	store *storeClient
}

func (h *haPlane) initialCluster() string {
	parts := make([]string, len(h.members))
	for i, m := range h.members {
		parts[i] = m.name + "=" + m.peer
	}
	return strings.Join(parts, ",")
}

func (h *haPlane) endpoints() []string {
	out := make([]string, len(h.members))
	for i, m := range h.members {
		out[i] = m.client
	}
	return out
}

func (h *haPlane) serverAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", h.ports[i]) }

func (h *haPlane) close() {
	if h.store != nil {
		h.store.close()
	}
	for _, f := range append(h.fronts, h.extra...) {
		f.Close()
	}
	if h.lb != nil {
		h.lb.Close()
	}
}

// upHA starts the etcd members, then the API servers and the balancer.
func (c *Cluster) upHA(ctx context.Context, p *pki) (servers, error) {
	ports, err := freePorts(2*etcdMembers + apiServers + 1)
	if err != nil {
		return servers{}, err
	}
	h := &haPlane{}
	for i := range etcdMembers {
		h.members = append(h.members, member{name: memberName(i),
			client: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]), peer: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])})
	}
	h.ports = ports[2*etcdMembers : 2*etcdMembers+apiServers]
	h.lbAddr = fmt.Sprintf("127.0.0.1:%d", ports[len(ports)-1])
	c.ha = h
	if err := os.WriteFile(filepath.Join(c.Dir, haMarker), []byte("three etcd members, two API servers\n"), 0o600); err != nil {
		return servers{}, err
	}
	for i := range h.members {
		if err := c.start(c.etcdMemberProcess(h, i)); err != nil {
			return servers{}, err
		}
	}
	for i := range h.members {
		if err := c.waitMember(ctx, i, 60*time.Second); err != nil {
			return servers{}, err
		}
	}
	var backends []string
	for i := range h.ports {
		if err := c.start(c.apiServerProcess(serverName(i), strings.Join(h.endpoints(), ","), h.ports[i], p)); err != nil {
			return servers{}, err
		}
		backends = append(backends, h.serverAddr(i))
	}
	if c.detached {
		if err := c.start(process{name: balancer, bin: c.BalancerBin,
			args: append([]string{"balance", "--listen", h.lbAddr}, backends...)}); err != nil {
			return servers{}, err
		}
	} else {
		for _, b := range backends {
			f, err := NewBalancer(b)
			if err != nil {
				return servers{}, err
			}
			h.fronts = append(h.fronts, f)
		}
		if h.lb, err = ListenBalancer(h.lbAddr, backends...); err != nil {
			return servers{}, err
		}
	}
	// The controller manager and the scheduler each keep to one API
	// server, as on a control-plane node; kwok's simulated kubelets go
	// through the balancer.
	return servers{admin: "https://" + h.lbAddr, components: map[string]string{
		controllerManager: "https://" + h.serverAddr(0),
		scheduler:         "https://" + h.serverAddr(1),
	}}, nil
}

func (c *Cluster) etcdMemberProcess(h *haPlane, i int) process {
	m := h.members[i]
	return process{name: m.name, bin: filepath.Join(c.K8sBin, etcd), args: []string{
		"--name=" + m.name, "--data-dir=" + filepath.Join(c.Dir, m.name),
		"--listen-client-urls=" + m.client, "--advertise-client-urls=" + m.client,
		"--listen-peer-urls=" + m.peer, "--initial-advertise-peer-urls=" + m.peer,
		"--initial-cluster=" + h.initialCluster(), "--initial-cluster-token=" + etcdClusterToken,
		"--initial-cluster-state=new",
		// A disposable cluster: speed over durability. A member killed
		// here loses nothing the kernel has (the machine does not crash).
		"--unsafe-no-fsync=true",
	}}
}

// waitMember waits until member i reports itself healthy: it runs and its
// cluster has a leader.
func (c *Cluster) waitMember(ctx context.Context, i int, timeout time.Duration) error {
	if err := waitHTTP(ctx, c.ha.members[i].client+"/health", timeout); err != nil {
		return c.failed(memberName(i), err)
	}
	return nil
}

// waitServers waits until every API server is ready, each asked directly.
func (c *Cluster) waitServers(ctx context.Context, timeout time.Duration) error {
	for i := range c.ha.ports {
		if err := waitReady(ctx, c.directConfig(i), timeout); err != nil {
			return c.failed(serverName(i), err)
		}
	}
	return nil
}

func (c *Cluster) requireHA() error {
	if c.ha == nil {
		return fmt.Errorf("cluster in %s: not an HA cluster started by this process", c.Dir)
	}
	return nil
}

// APIServers is the number of API servers (1 unless HA).
func (c *Cluster) APIServers() int {
	if c.ha == nil {
		return 1
	}
	return len(c.ha.ports)
}

// APIServerConfig is the administrator's client configuration pointed at
// API server i alone, through the proxy in front of it (so that CutAPIServer
// cuts it too).
func (c *Cluster) APIServerConfig(i int) *rest.Config {
	cfg := rest.CopyConfig(c.RestConfig)
	if c.ha != nil && i < len(c.ha.fronts) {
		cfg.Host = "https://" + c.ha.fronts[i].Addr()
	}
	return cfg
}

// directConfig is the administrator's configuration for API server i,
// without a proxy in between.
func (c *Cluster) directConfig(i int) *rest.Config {
	cfg := rest.CopyConfig(c.RestConfig)
	cfg.Host = "https://" + c.ha.serverAddr(i)
	return cfg
}

// StopAPIServer stops API server i: gracefully (SIGTERM: it stops taking
// requests, ends its watches and drains what is in flight), or, with crash,
// at once (SIGKILL). Its clients reconnect elsewhere, or fail until it is
// back.
func (c *Cluster) StopAPIServer(i int, crash bool) error {
	if err := c.requireHA(); err != nil {
		return err
	}
	if crash {
		return c.kill(serverName(i))
	}
	return c.stop(serverName(i), 30*time.Second)
}

// StartAPIServer starts API server i again, as it was started, and waits
// until it is ready: its watch caches have listed everything anew.
func (c *Cluster) StartAPIServer(ctx context.Context, i int) error {
	if err := c.requireHA(); err != nil {
		return err
	}
	if err := waitListenable(ctx, c.ha.serverAddr(i), 10*time.Second); err != nil {
		return fmt.Errorf("restart %s: %w", serverName(i), err)
	}
	if err := c.restart(serverName(i)); err != nil {
		return err
	}
	if err := waitReady(ctx, c.directConfig(i), 90*time.Second); err != nil {
		return c.failed(serverName(i), err)
	}
	return nil
}

// CutAPIServer cuts the network to API server i for every client: the
// connections through its proxy and through the balancer end, new ones
// through its proxy are closed as soon as they are accepted, and the
// balancer passes new ones to the other server. The API server itself runs
// on, reaches etcd and calls the webhooks.
func (c *Cluster) CutAPIServer(i int) error {
	if err := c.requireHA(); err != nil {
		return err
	}
	if c.ha.lb == nil {
		return fmt.Errorf("cluster in %s: a detached cluster has no proxies to cut", c.Dir)
	}
	addr := c.ha.serverAddr(i)
	c.ha.fronts[i].Cut(addr)
	for _, b := range append([]*Balancer{c.ha.lb}, c.ha.extra...) {
		b.Cut(addr)
	}
	return nil
}

// HealAPIServer ends a CutAPIServer.
func (c *Cluster) HealAPIServer(i int) error {
	if err := c.requireHA(); err != nil {
		return err
	}
	if c.ha.lb == nil {
		return nil
	}
	addr := c.ha.serverAddr(i)
	c.ha.fronts[i].Heal(addr)
	for _, b := range append([]*Balancer{c.ha.lb}, c.ha.extra...) {
		b.Heal(addr)
	}
	return nil
}

// NewAPIBalancer starts one more balancer in front of the API servers, for
// clients whose connections a test wants to see (Balancer.Backends, with
// APIServerAddr): the cluster cuts and heals it with the others.
func (c *Cluster) NewAPIBalancer() (*Balancer, error) {
	if err := c.requireHA(); err != nil {
		return nil, err
	}
	var backends []string
	for i := range c.ha.ports {
		backends = append(backends, c.ha.serverAddr(i))
	}
	b, err := NewBalancer(backends...)
	if err != nil {
		return nil, err
	}
	c.ha.extra = append(c.ha.extra, b)
	return b, nil
}

// APIServerAddr is the address (127.0.0.1:port) where API server i listens.
func (c *Cluster) APIServerAddr(i int) string { return c.ha.serverAddr(i) }

// EtcdMembers is the number of etcd members.
func (c *Cluster) EtcdMembers() int {
	if c.ha == nil {
		return 1
	}
	return len(c.ha.members)
}

// KillEtcdMember kills etcd member i (SIGKILL): a crash. The other two keep
// a quorum.
func (c *Cluster) KillEtcdMember(i int) error {
	if err := c.requireHA(); err != nil {
		return err
	}
	return c.kill(memberName(i))
}

// StartEtcdMember starts etcd member i again on its data and waits until it
// is healthy (it has rejoined and its cluster has a leader).
func (c *Cluster) StartEtcdMember(ctx context.Context, i int) error {
	if err := c.requireHA(); err != nil {
		return err
	}
	if err := c.restart(memberName(i)); err != nil {
		return err
	}
	return c.waitMember(ctx, i, 60*time.Second)
}

// EtcdMemberRunning says whether etcd member i's process runs.
func (c *Cluster) EtcdMemberRunning(i int) bool {
	_, ok := c.pid(memberName(i))
	return ok
}

// APIServerRunning says whether API server i's process runs.
func (c *Cluster) APIServerRunning(i int) bool {
	_, ok := c.pid(serverName(i))
	return ok
}

// UserConfig is a client configuration that authenticates as user in
// groups, with a client certificate of the cluster's CA (issued once, as
// file name in the cluster's pki directory), through the balancer.
func (c *Cluster) UserConfig(name, user string, groups ...string) (*rest.Config, error) {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return nil, err
	}
	if err := p.client(name, user, groups...); err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(c.RestConfig)
	cfg.CertFile, cfg.KeyFile = p.path(name+".crt"), p.path(name+".key")
	return cfg, nil
}

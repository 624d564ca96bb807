package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The pod network of the real nodes (docs/cluster.md, "The pod network"):
// a pod that is not host-network gets an address of its own, which the API
// server reaches (webhooks, through their Service's endpoints) and from
// which the pod reaches the API server at the kubernetes Service's address,
// as in a user's cluster. It is one Linux bridge of the machine, named
// after the cluster's directory, created at start and removed at stop:
//
//   - the bridge carries 10.N.0.1/17, the pods' gateway, and 10.N.128.1/32,
//     the kubernetes Service's address (the first of the service range
//     10.N.128.0/17), where the cluster forwards each connection to the API
//     server (a TCP proxy: the API server itself listens on 127.0.0.1);
//   - each real node's containerd attaches its pods to the bridge (the CNI
//     bridge plugin, no gateway or masquerade of its own) with addresses
//     from 10.N.<node>.0/24 and a default route through 10.N.0.1.
//
// Nothing is routed or forwarded: every packet goes between a pod and the
// machine itself, so no firewall rule, forwarding or other kernel setting
// changes.
type podNetwork struct {
	// second is N, the second byte of the network's addresses.
	second int
	bridge string
}

// podNetFile keeps the pod network of a started cluster.
const podNetFile = "podnet"

// serviceIP is the kubernetes Service's address.
func (n podNetwork) serviceIP() string { return fmt.Sprintf("10.%d.128.1", n.second) }

// serviceRange is the API server's service-cluster-ip-range.
func (n podNetwork) serviceRange() string { return fmt.Sprintf("10.%d.128.0/17", n.second) }

func (n podNetwork) gateway() string { return fmt.Sprintf("10.%d.0.1", n.second) }

// nodeRange is where node i (1-based) takes its pods' addresses.
func (n podNetwork) nodeRange(i int) (subnet, start, end string) {
	return fmt.Sprintf("10.%d.0.0/17", n.second), fmt.Sprintf("10.%d.%d.2", n.second, i), fmt.Sprintf("10.%d.%d.254", n.second, i)
}

// bridgeName is the cluster's bridge: "fl" and six hex digits of the hash
// of its directory (an interface name has at most 15 bytes).
func (c *Cluster) bridgeName() string {
	sum := sha256.Sum256([]byte(c.Dir))
	return "fl" + hex.EncodeToString(sum[:3])
}

// choosePodNetwork picks N: from the directory's hash, the first one whose
// 10.N.0.0/16 no address of the machine is in (another cluster's bridge,
// or the machine's own network), and records it. With real nodes it makes
// the bridge at once, under a lock of the machine's, so that two clusters
// starting together do not pick the same N.
func (c *Cluster) choosePodNetwork() (podNetwork, error) {
	if len(c.RealNodes) > 0 && !c.ControlPlaneOnly {
		lock, err := os.OpenFile(filepath.Join(os.TempDir(), "fencedlease-podnet.lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return podNetwork{}, err
		}
		defer lock.Close()
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			return podNetwork{}, err
		}
		defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
		// An earlier run's bridge of this directory is not another's.
		_ = deleteLink(c.bridgeName())
		n, err := c.pickPodNetwork()
		if err != nil {
			return n, err
		}
		if err := n.createBridge(); err != nil {
			return n, fmt.Errorf("pod network: %w", err)
		}
		return n, nil
	}
	return c.pickPodNetwork()
}

func (c *Cluster) pickPodNetwork() (podNetwork, error) {
	sum := sha256.Sum256([]byte(c.Dir))
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return podNetwork{}, err
	}
	used := map[int]bool{}
	for _, a := range addrs {
		if ip, _, err := net.ParseCIDR(a.String()); err == nil && ip.To4() != nil && ip.To4()[0] == 10 {
			used[int(ip.To4()[1])] = true
		}
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return podNetwork{}, err
	}
	for i := range 50 {
		second := 200 + (int(sum[0])+i)%50
		if !used[second] {
			n := podNetwork{second: second, bridge: c.bridgeName()}
			return n, os.WriteFile(filepath.Join(c.Dir, podNetFile), []byte(strconv.Itoa(second)), 0o600)
		}
	}
	return podNetwork{}, errors.New("no free 10.N.0.0/16 for the pod network among 10.200–10.249")
}

// podNet is the pod network of the running cluster.
func (c *Cluster) podNet() (podNetwork, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, podNetFile))
	if err != nil {
		return podNetwork{}, fmt.Errorf("cluster: no pod network: %w", err)
	}
	second, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return podNetwork{}, fmt.Errorf("cluster: %s: %w", podNetFile, err)
	}
	return podNetwork{second: second, bridge: c.bridgeName()}, nil
}

// createBridge makes the bridge, with the gateway's and the Service's
// addresses; a bridge of the same name (an earlier run's) goes first.
func (n podNetwork) createBridge() error {
	_ = deleteLink(n.bridge)
	// A bridge takes the lowest address of its ports unless it has one of
	// its own: it would change as pods come and go, and the pods' ARP
	// entries for the gateway would go stale (connections time out).
	for _, args := range [][]string{
		{"link", "add", n.bridge, "address", n.bridgeMAC().String(), "type", "bridge"},
		{"addr", "add", n.gateway() + "/17", "dev", n.bridge},
		{"addr", "add", n.serviceIP() + "/32", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// bridgeMAC is the bridge's own (locally administered) address.
func (n podNetwork) bridgeMAC() net.HardwareAddr {
	sum := sha256.Sum256([]byte(n.bridge))
	return net.HardwareAddr{0x02, sum[0], sum[1], sum[2], sum[3], sum[4]}
}

// deleteLink removes an interface of the machine; one that does not exist
// is no error.
func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link del %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// cniConfig is node i's CNI configuration: its pods on the bridge, with
// addresses of the node's range and a default route through the gateway;
// the bridge plugin sets no address, route or forwarding of the machine's.
func (n podNetwork) cniConfig(i int) string {
	subnet, start, end := n.nodeRange(i)
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "fencedlease", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": false, "ipMasq": false, "hairpinMode": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "rangeStart": %q, "rangeEnd": %q, "gateway": %q}]],
            "routes": [{"dst": "0.0.0.0/0", "gw": %q}]}},
  {"type": "loopback"}
]}
`, n.bridge, subnet, start, end, n.gateway(), n.gateway())
}

// nodeIndex is the node's place among the real nodes, from 1.
func (c *Cluster) nodeIndex(node string) int {
	for i, n := range c.RealNodes {
		if n == node {
			return i + 1
		}
	}
	return len(c.RealNodes) + 1
}

// serviceProxyName is the process that forwards the kubernetes Service's
// address to the API server in a detached cluster.
const serviceProxyName = "service-proxy"

// startPodNetwork starts the forwarding from the
// kubernetes Service's address (port 443) to the API server at s.admin,
// when the cluster has real nodes.
func (c *Cluster) startPodNetwork(s servers) error {
	if len(c.RealNodes) == 0 {
		return nil
	}
	u, err := url.Parse(s.admin)
	if err != nil {
		return err
	}
	listen := net.JoinHostPort(c.net.serviceIP(), "443")
	if c.detached {
		return c.start(process{name: serviceProxyName, bin: c.BalancerBin, args: []string{"balance", "--listen", listen, u.Host}})
	}
	c.serviceProxy, err = ListenBalancer(listen, u.Host)
	return err
}

// stopPodNetwork stops the forwarding and removes the bridge (the pods'
// interfaces on it went with their network namespaces).
func (c *Cluster) stopPodNetwork() error {
	if c.serviceProxy != nil {
		_ = c.serviceProxy.Close()
		c.serviceProxy = nil
	}
	err := c.stop(serviceProxyName, 5*time.Second)
	if err := deleteLink(c.bridgeName()); err != nil {
		return err
	}
	if rerr := os.Remove(filepath.Join(c.Dir, podNetFile)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return rerr
	}
	return err
}

package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePorts returns n distinct ports that are free on 127.0.0.1 now, for
// the servers a test starts as processes (which must be told their port).
// Another process may take one before the server does; the tests' servers
// fail to start then, and say so.
//
// The ports are taken below the kernel's ephemeral range when there is room
// there. A server the tests restart on its port (an API server, an etcd
// member) would otherwise find it taken by a client's outgoing connection,
// or by a client that connected to itself: a dial to a port nobody listens
// on, from that same port as the source, connects.
func FreePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := listenBelowEphemeral()
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// lowestPort is where the ports below the ephemeral range start: above the
// well-known and most registered services' ports.
const lowestPort = 10000

// listenBelowEphemeral listens on a free port below the ephemeral range,
// or on any free port when that range leaves no room below it.
func listenBelowEphemeral() (net.Listener, error) {
	if low := ephemeralLow(); low > lowestPort+1000 {
		for range 50 {
			port := lowestPort + rand.IntN(low-lowestPort) //nolint:gosec // a port to try, not a secret
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux),
// 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0
	}
	return low
}

// FreePort is one of FreePorts.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreeAddress is 127.0.0.1 with a FreePort.
func FreeAddress() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

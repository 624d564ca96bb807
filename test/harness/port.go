package harness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// FreePorts returns n distinct ports that are free on 127.0.0.1 now, for
// the servers a test starts as processes (which must be told their port).
// A port is handed out once: to one call in this process, and to no other
// test process while this one runs (each claims its ports with a lock on a
// file named after the port, released when the process ends). A process
// that is not a test may still take one before the server does; the tests'
// servers fail to start then, and say so.
//
// The ports are taken below the kernel's ephemeral range when there is room
// there. A server the tests restart on its port (an API server, an etcd
// member) would otherwise find it taken by a client's outgoing connection,
// or by a client that connected to itself: a dial to a port nobody listens
// on, from that same port as the source, connects.
func FreePorts(n int) ([]int, error) {
	claims.mu.Lock()
	defer claims.mu.Unlock()
	out := make([]int, 0, n)
	for range n {
		port, err := claimPort()
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		out = append(out, port)
	}
	return out, nil
}

// claims are the ports this process handed out, with the lock files that
// keep other test processes off them (held open until the process ends).
var claims = struct {
	mu    sync.Mutex
	ports map[int]*os.File
}{ports: map[int]*os.File{}}

// lowestPort is where the ports below the ephemeral range start: above the
// well-known and most registered services' ports.
const lowestPort = 10000

// claimPort finds a port that is free now, not handed out before in this
// process, and not claimed by another test process, and claims it;
// claims.mu must be held.
func claimPort() (int, error) {
	low := ephemeralLow()
	for range 200 {
		addr := "127.0.0.1:0"
		if low > lowestPort+1000 {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(lowestPort+rand.IntN(low-lowestPort))) //nolint:gosec // a port to try, not a secret
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if claims.ports[port] != nil {
			continue
		}
		f, err := lockPort(port)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			continue
		}
		if err != nil {
			return 0, err
		}
		claims.ports[port] = f
		return port, nil
	}
	return 0, errors.New("no free port after 200 tries")
}

// lockPort takes the lock of port's file, without waiting, and keeps the
// file open: the lock lasts as long as this process.
func lockPort(port int) (*os.File, error) {
	dir := filepath.Join(os.TempDir(), "fencedlease-test-ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
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

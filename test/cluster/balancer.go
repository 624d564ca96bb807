package cluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Balancer stands in for a load balancer in front of several local
// servers: the webhook Service of a real cluster in front of several
// operator replicas (the webhook configurations call its address by URL),
// or the load balancer in front of the API servers of an HA control plane.
// It passes each TCP connection (TLS and all) to the next backend that
// accepts one. A backend that is down refuses the connection and the next
// one gets it, as when kube-proxy has dropped an unready endpoint.
//
// A backend can be cut off (Cut): its connections are closed and no new one
// reaches it until Heal, as when the network to it fails. A Balancer with
// one backend is then a TCP proxy whose connections can be cut.
type Balancer struct {
	l        net.Listener
	backends []string
	mu       sync.Mutex
	next     int
	cut      map[string]bool
	// conns are the connections passed to each backend: the client's side
	// and the backend's.
	conns map[string]map[net.Conn]bool
	wg    sync.WaitGroup
}

// NewBalancer listens on 127.0.0.1 at a free port.
func NewBalancer(backends ...string) (*Balancer, error) {
	return ListenBalancer("127.0.0.1:0", backends...)
}

// ListenBalancer listens at addr (host:port).
func ListenBalancer(addr string, backends ...string) (*Balancer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &Balancer{l: l, backends: backends, cut: map[string]bool{}, conns: map[string]map[net.Conn]bool{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// Port is the port it listens on.
func (b *Balancer) Port() int { return b.l.Addr().(*net.TCPAddr).Port }

// Addr is the address it listens at (127.0.0.1:port).
func (b *Balancer) Addr() string { return b.l.Addr().String() }

// Close stops listening; connections in flight finish.
func (b *Balancer) Close() error {
	err := b.l.Close()
	b.wg.Wait()
	return err
}

// Cut closes every connection passed to the backend and passes it no new
// one until Heal: to its clients, the network to it has failed (their
// connections through the Balancer end at once, and a new one goes to
// another backend, or, when there is none, is closed as soon as it is
// accepted).
func (b *Balancer) Cut(backend string) {
	b.mu.Lock()
	b.cut[backend] = true
	conns := b.conns[backend]
	b.conns[backend] = nil
	b.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Heal ends a Cut.
func (b *Balancer) Heal(backend string) {
	b.mu.Lock()
	delete(b.cut, backend)
	b.mu.Unlock()
}

// Backends counts, per backend, the connections passed to it that are open
// now: where the clients behind the Balancer are connected.
func (b *Balancer) Backends() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int{}
	for addr, conns := range b.conns {
		if n := len(conns) / 2; n > 0 { // the client's side and the backend's
			out[addr] = n
		}
	}
	return out
}

func (b *Balancer) serve() {
	defer b.wg.Done()
	for {
		conn, err := b.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go b.pass(conn)
	}
}

func (b *Balancer) pass(conn net.Conn) {
	defer conn.Close()
	b.mu.Lock()
	start := b.next
	b.next = (b.next + 1) % len(b.backends)
	b.mu.Unlock()
	for i := range b.backends {
		addr := b.backends[(start+i)%len(b.backends)]
		if b.isCut(addr) {
			continue
		}
		up, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			continue
		}
		if !b.track(addr, conn, up) {
			up.Close() // cut while dialling
			continue
		}
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(up, conn); closeWrite(up); done <- struct{}{} }()
		go func() { _, _ = io.Copy(conn, up); closeWrite(conn); done <- struct{}{} }()
		<-done
		<-done
		up.Close()
		b.untrack(addr, conn, up)
		return
	}
}

func (b *Balancer) isCut(addr string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cut[addr]
}

// track registers a connection passed to addr, unless addr is cut.
func (b *Balancer) track(addr string, conns ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cut[addr] {
		return false
	}
	if b.conns[addr] == nil {
		b.conns[addr] = map[net.Conn]bool{}
	}
	for _, c := range conns {
		b.conns[addr][c] = true
	}
	return true
}

func (b *Balancer) untrack(addr string, conns ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range conns {
		delete(b.conns[addr], c)
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

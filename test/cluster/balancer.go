package cluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Balancer stands in for the webhook Service of a real cluster in front of
// several local operator replicas: the webhook configurations call its
// address by URL, and it passes each TCP connection (TLS and all) to the
// next replica that accepts one. A replica that is down refuses the
// connection and the next one gets it, as when kube-proxy has dropped an
// unready endpoint.
type Balancer struct {
	l        net.Listener
	backends []string
	mu       sync.Mutex
	next     int
	wg       sync.WaitGroup
}

// NewBalancer listens on 127.0.0.1 at a free port.
func NewBalancer(backends ...string) (*Balancer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Balancer{l: l, backends: backends}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// Port is the port it listens on.
func (b *Balancer) Port() int { return b.l.Addr().(*net.TCPAddr).Port }

// Close stops listening; connections in flight finish.
func (b *Balancer) Close() error {
	err := b.l.Close()
	b.wg.Wait()
	return err
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
		up, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			continue
		}
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(up, conn); closeWrite(up); done <- struct{}{} }()
		go func() { _, _ = io.Copy(conn, up); closeWrite(conn); done <- struct{}{} }()
		<-done
		<-done
		up.Close()
		return
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

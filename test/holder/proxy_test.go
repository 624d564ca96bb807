package holder_test

import (
	"net"
	"sync"
	"testing"
)

// apiProxy is a TCP proxy on 127.0.0.1 in front of the API server, through
// which one holder reaches it, so that a test can partition that holder
// alone. It forwards bytes (TLS passes through: the API server's
// certificate is valid for 127.0.0.1 on any port).
//
// Cut is a partition, not a refusal: from then on nothing passes in either
// direction, but every connection stays open, so requests in flight and
// watches hang, and new connections are accepted and hang too, as when
// packets are dropped. Heal ends it: the connections that lost bytes are
// closed (as their peers would eventually time them out), new ones pass.
type apiProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[*proxyConn]struct{}
	closed bool
}

type proxyConn struct {
	client, upstream net.Conn
	cut              bool // lost bytes: closed on Heal
}

func startProxy(t *testing.T, target string) *apiProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is host:port of the proxy.
func (p *apiProxy) Addr() string { return p.ln.Addr().String() }

// Cut partitions the holder from the API server.
func (p *apiProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.cut = true
	}
}

// Heal ends the partition.
func (p *apiProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for c := range p.conns {
		if c.cut {
			c.closeLocked(p)
		}
	}
}

func (p *apiProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for c := range p.conns {
		c.closeLocked(p)
	}
}

func (c *proxyConn) closeLocked(p *apiProxy) {
	_ = c.client.Close()
	if c.upstream != nil {
		_ = c.upstream.Close()
	}
	delete(p.conns, c)
}

// dropping says whether bytes of c are dropped now.
func (p *apiProxy) dropping(c *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.cut
}

func (p *apiProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(client)
	}
}

func (p *apiProxy) serve(client net.Conn) {
	c := &proxyConn{client: client}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		return
	}
	c.cut = p.cut
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	var up net.Conn
	if !p.dropping(c) {
		var err error
		if up, err = net.Dial("tcp", p.target); err != nil {
			p.drop(c)
			return
		}
		p.mu.Lock()
		_, open := p.conns[c]
		if open {
			c.upstream = up
		}
		p.mu.Unlock()
		if !open {
			_ = up.Close()
			return
		}
		go p.pipe(c, up, client)
	}
	p.pipe(c, client, up)
}

func (p *apiProxy) drop(c *proxyConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.conns[c]; ok {
		c.closeLocked(p)
	}
}

// pipe copies from src to dst until either fails, dropping what it reads
// while the connection is cut (a connection accepted during a cut has no
// upstream: all it sends is dropped).
func (p *apiProxy) pipe(c *proxyConn, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && dst != nil && !p.dropping(c) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			p.drop(c)
			return
		}
	}
}

package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// echo serves name on every connection, until the test ends.
func echo(t *testing.T, name string) (net.Listener, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, name)
			c.Close()
		}
	}()
	return l, l.Addr().String()
}

func ask(t *testing.T, b *Balancer) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", b.Port()))
	if err != nil {
		return "", err
	}
	defer c.Close()
	return bufio.NewReader(c).ReadString('\n')
}

// TestBalancerSkipsADeadBackend: connections go to the backends in turn;
// once one stops listening, every connection reaches the other.
func TestBalancerSkipsADeadBackend(t *testing.T) {
	g := NewWithT(t)
	la, a := echo(t, "a")
	_, bAddr := echo(t, "b")
	b, err := NewBalancer(a, bAddr)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { b.Close() })

	seen := map[string]int{}
	for range 4 {
		got, err := ask(t, b)
		g.Expect(err).NotTo(HaveOccurred())
		seen[got]++
	}
	g.Expect(seen).To(Equal(map[string]int{"a\n": 2, "b\n": 2}), "both backends in turn")

	la.Close()
	for i := range 4 {
		got, err := ask(t, b)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal("b\n"), "connection %d after a stopped", i)
	}
}

// hold serves name on every connection and keeps it open until the client
// closes it, until the test ends.
func hold(t *testing.T, name string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintln(c, name)
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return l.Addr().String()
}

// TestBalancerCut: a cut backend's connections end at once and new ones go
// to the other backend; a Balancer whose only backend is cut closes every
// connection it accepts; after Heal the backend gets connections again.
func TestBalancerCut(t *testing.T) {
	g := NewWithT(t)
	a, bAddr := hold(t, "a"), hold(t, "b")
	lb, err := NewBalancer(a, bAddr)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { lb.Close() })
	front, err := NewBalancer(a)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { front.Close() })

	open := func(b *Balancer) (net.Conn, string) {
		c, err := net.Dial("tcp", b.Addr())
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { c.Close() })
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		got, _ := bufio.NewReader(c).ReadString('\n')
		return c, got
	}
	var toA []net.Conn
	for range 2 {
		c, got := open(lb)
		if got == "a\n" {
			toA = append(toA, c)
		}
	}
	g.Expect(toA).To(HaveLen(1), "one of two connections to each backend")
	viaFront, got := open(front)
	g.Expect(got).To(Equal("a\n"))

	lb.Cut(a)
	front.Cut(a)
	for _, c := range []net.Conn{toA[0], viaFront} {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		g.Expect(err).To(Equal(io.EOF), "a connection to the cut backend ends at once")
	}
	for range 4 {
		_, got := open(lb)
		g.Expect(got).To(Equal("b\n"), "new connections avoid the cut backend")
	}
	_, got = open(front)
	g.Expect(got).To(BeEmpty(), "the proxy of a cut backend closes what it accepts")

	lb.Heal(a)
	front.Heal(a)
	_, got = open(front)
	g.Expect(got).To(Equal("a\n"), "healed")
}

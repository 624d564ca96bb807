package cluster

import (
	"bufio"
	"fmt"
	"net"
	"testing"

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

package storage_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// trickle is an upload sent by hand, part of its body now and the rest
// later, as a writer paused mid-body would send it.
type trickle struct {
	conn net.Conn
}

// startTrickle sends a PUT of target with header and a body of total
// bytes, of which first now.
func startTrickle(t *testing.T, target string, header map[string]string, total int, first string) *trickle {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", u.RequestURI(), u.Host, total)
	for k, v := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n" + first)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	return &trickle{conn: conn}
}

// finish sends the rest of the body and reads the answer: its status and
// body ("" and 0 when the gateway closed the connection without one).
func (tr *trickle) finish(rest string) (int, string) {
	_, _ = io.WriteString(tr.conn, rest)
	return tr.answer()
}

// answer reads the answer.
func (tr *trickle) answer() (int, string) {
	_ = tr.conn.SetReadDeadline(time.Now().Add(timeout))
	resp, err := http.ReadResponse(bufio.NewReader(tr.conn), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// abandon closes the connection, as a client that gave up does.
func (tr *trickle) abandon() { _ = tr.conn.Close() }

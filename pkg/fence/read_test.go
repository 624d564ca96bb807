package fence_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fence/fencetest"
)

const absentMsg = `token files absent: label the pod fencedlease.io/inject: "true" so that the operator mounts them`

// writePlain writes the three files directly, as in local development.
func writePlain(t *testing.T, dir, role, fenceValue, lease string) {
	t.Helper()
	for name, content := range map[string]string{fence.RoleFile: role, fence.FenceFile: fenceValue, fence.LeaseFile: lease} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func newKubelet(t testing.TB) *fencetest.KubeletWriter {
	t.Helper()
	k, err := fencetest.NewKubeletWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestReadValid(t *testing.T) {
	tests := []struct {
		name               string
		role, fence, lease string
		want               fence.Token
	}{
		{name: "holder", role: "holder", fence: "42", lease: "db", want: fence.Token{Role: fence.RoleHolder, Fence: 42, Lease: "db"}},
		{name: "standby", role: "standby", fence: "", lease: "db", want: fence.Token{Role: fence.RoleStandby, Lease: "db"}},
		{name: "standby ignores a fence", role: "standby", fence: "41", lease: "db", want: fence.Token{Role: fence.RoleStandby, Lease: "db"}},
		{name: "role not published yet", role: "", fence: "", lease: "", want: fence.Token{Role: fence.RoleStandby}},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/kubelet", func(t *testing.T) {
			g := NewWithT(t)
			k := newKubelet(t)
			g.Expect(k.WriteToken(tt.role, tt.fence, tt.lease)).To(Succeed())
			g.Expect(fence.Read(k.Dir())).To(Equal(tt.want))
		})
		t.Run(tt.name+"/plain", func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			writePlain(t, dir, tt.role, tt.fence, tt.lease)
			g.Expect(fence.Read(dir)).To(Equal(tt.want))
		})
	}
}

func TestReadMalformed(t *testing.T) {
	tests := []struct {
		name               string
		role, fence, lease string
		file               string
		wantErr            string
	}{
		{name: "holder without fence", role: "holder", fence: "", file: "fence", wantErr: "role is holder but the fence is empty"},
		{name: "leading zero", role: "holder", fence: "007", file: "fence", wantErr: `invalid fence "007": leading zero`},
		{name: "trailing newline", role: "holder", fence: "42\n", file: "fence", wantErr: `invalid fence "42\n": whitespace not allowed`},
		{name: "negative", role: "holder", fence: "-1", file: "fence", wantErr: `invalid fence "-1": sign not allowed`},
		{name: "overflow", role: "holder", fence: "9223372036854775808", file: "fence", wantErr: `invalid fence "9223372036854775808": out of range for int64`},
		{name: "unknown role", role: "leader", fence: "42", file: "role", wantErr: `unknown role "leader" (want "holder" or "standby")`},
		{name: "role with newline", role: "holder\n", fence: "42", file: "role", wantErr: `unknown role "holder\n" (want "holder" or "standby")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			k := newKubelet(t)
			g.Expect(k.WriteToken(tt.role, tt.fence, "db")).To(Succeed())
			_, err := fence.Read(k.Dir())
			g.Expect(err).To(MatchError(fmt.Sprintf("malformed token file %s: %s", filepath.Join(k.Dir(), tt.file), tt.wantErr)))
			g.Expect(errors.Is(err, fence.ErrMalformed)).To(BeTrue())
		})
	}
}

func TestReadAbsent(t *testing.T) {
	g := NewWithT(t)
	missing := filepath.Join(t.TempDir(), "nope")
	_, err := fence.Read(missing)
	g.Expect(err).To(MatchError("read " + missing + ": " + absentMsg))
	g.Expect(errors.Is(err, fence.ErrAbsent)).To(BeTrue())

	empty := t.TempDir()
	_, err = fence.Read(empty)
	g.Expect(err).To(MatchError("read " + filepath.Join(empty, "role") + ": " + absentMsg))

	partial := t.TempDir()
	writePlain(t, partial, "holder", "1", "db")
	g.Expect(os.Remove(filepath.Join(partial, "lease"))).To(Succeed())
	_, err = fence.Read(partial)
	g.Expect(err).To(MatchError("read " + filepath.Join(partial, "lease") + ": " + absentMsg))
}

// TestReadNeverMixes flips the files many times while readers read. Every
// update is a triple whose parts name the same index, so any mix of two
// updates is visible; each reader must also see indexes in order.
func TestReadNeverMixes(t *testing.T) {
	g := NewWithT(t)
	k := newKubelet(t)
	g.Expect(k.Standby("s0")).To(Succeed())
	const flips = 500
	var done atomic.Bool
	var wg sync.WaitGroup
	var reads, unstable atomic.Int64
	errs := make(chan error, 4)
	for range 2 {
		wg.Go(func() {
			last := -1
			for !done.Load() {
				tok, err := fence.Read(k.Dir())
				reads.Add(1)
				if errors.Is(err, fence.ErrUnstable) {
					unstable.Add(1)
					continue
				}
				idx, cerr := checkTriple(tok, err)
				if cerr == nil && idx < last {
					cerr = fmt.Errorf("went back from update %d to %d", last, idx)
				}
				if cerr != nil {
					errs <- cerr
					return
				}
				last = idx
			}
		})
	}
	for i := 1; i <= flips; i++ {
		var err error
		if i%2 == 0 {
			err = k.Holder(int64(i), "l"+strconv.Itoa(i))
		} else {
			err = k.Standby("s" + strconv.Itoa(i))
		}
		g.Expect(err).NotTo(HaveOccurred())
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	g.Expect(<-errs).NotTo(HaveOccurred())
	g.Expect(reads.Load()).To(BeNumerically(">", unstable.Load()))
}

// checkTriple returns the update index of a reading, or why it is mixed.
func checkTriple(tok fence.Token, err error) (int, error) {
	if err != nil {
		return 0, fmt.Errorf("read error (mixed read): %w", err)
	}
	if tok.IsHolder() {
		if tok.Lease != "l"+strconv.FormatInt(tok.Fence, 10) {
			return 0, fmt.Errorf("mixed read: %+v", tok)
		}
		return int(tok.Fence), nil
	}
	idx, ok := strings.CutPrefix(tok.Lease, "s")
	if tok.Role != fence.RoleStandby || !ok {
		return 0, fmt.Errorf("mixed read: %+v", tok)
	}
	return strconv.Atoi(idx)
}

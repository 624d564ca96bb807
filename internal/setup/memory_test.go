package setup

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestSoftMemoryLimit(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		limit int64
		ok    bool
		err   string
	}{
		{name: "no limit given", env: map[string]string{}},
		{name: "90 % of the container's limit", env: map[string]string{MemoryLimitEnv: "268435456"}, limit: 241591905, ok: true},
		{name: "GOMEMLIMIT wins", env: map[string]string{MemoryLimitEnv: "268435456", "GOMEMLIMIT": "100MiB"}},
		{name: "a quantity is not bytes", env: map[string]string{MemoryLimitEnv: "256Mi"},
			err: `FENCEDLEASE_MEMORY_LIMIT="256Mi": want the container's memory limit, a positive number of bytes`},
		{name: "zero", env: map[string]string{MemoryLimitEnv: "0"},
			err: `FENCEDLEASE_MEMORY_LIMIT="0": want the container's memory limit, a positive number of bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			limit, ok, err := SoftMemoryLimit(func(k string) string { return tt.env[k] })
			if tt.err != "" {
				g.Expect(err).To(MatchError(tt.err))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ok).To(Equal(tt.ok))
			g.Expect(limit).To(Equal(tt.limit))
		})
	}
}

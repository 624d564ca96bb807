package setup

import (
	"fmt"
	"strconv"
	"strings"
)

// MemoryLimitEnv names the environment variable that carries the
// container's memory limit in bytes (the downward API's limits.memory, as
// the chart and config/manager set it).
const MemoryLimitEnv = "FENCEDLEASE_MEMORY_LIMIT"

// SoftMemoryLimit is the Go runtime's soft memory limit for a container
// limit of limit bytes (getenv(MemoryLimitEnv)): 90 % of it, so that the
// garbage collector works harder as the heap nears the limit instead of the
// container being killed, with room for what the runtime does not count.
// GOMEMLIMIT, if set, is the runtime's own setting and wins: ok is false,
// as it is when no limit is given.
func SoftMemoryLimit(getenv func(string) string) (limit int64, ok bool, err error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, false, nil
	}
	raw := strings.TrimSpace(getenv(MemoryLimitEnv))
	if raw == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n <= 0 {
		return 0, false, fmt.Errorf("%s=%q: want the container's memory limit, a positive number of bytes", MemoryLimitEnv, raw)
	}
	return n / 10 * 9, true, nil
}

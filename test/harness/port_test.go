package harness

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestFreePortsNeverRepeatInAProcess: a test process that starts many
// servers asks for a port many times; a port handed out twice is a server
// that cannot start. With 3,000 picks among the ~22,000 ports below the
// ephemeral range, picks that only check that the port is free now repeat
// about 200 times.
func TestFreePortsNeverRepeatInAProcess(t *testing.T) {
	seen := map[int]int{}
	for i := range 3000 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if j, ok := seen[p]; ok {
			t.Fatalf("port %d handed out twice in one process: picks %d and %d", p, j, i)
		}
		seen[p] = i
	}
}

// claimEnv makes the test binary a process that claims ports, prints them,
// and holds them until its standard input closes.
const claimEnv = "FENCEDLEASE_HARNESS_CLAIM_PORTS"

// TestFreePortsSkipThePortsOfAnotherTestProcess: test packages run as
// processes side by side; a port one of them holds for a server it has not
// started yet is not handed out by another.
func TestFreePortsSkipThePortsOfAnotherTestProcess(t *testing.T) {
	if n := os.Getenv(claimEnv); n != "" {
		holdPorts(t, n)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFreePortsSkipThePortsOfAnotherTestProcess$") //nolint:gosec // the test binary itself
	cmd.Env = append(os.Environ(), claimEnv+"=1000")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	theirs := map[int]bool{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "held" {
			break
		}
		if p, err := strconv.Atoi(strings.TrimPrefix(line, "port ")); err == nil && strings.HasPrefix(line, "port ") {
			theirs[p] = true
		}
	}
	if len(theirs) != 1000 {
		t.Fatalf("the other process reported %d ports, want 1000", len(theirs))
	}
	ours, err := FreePorts(2000)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ours {
		if theirs[p] {
			t.Fatalf("port %d handed out here while another test process holds it", p)
		}
	}
}

// holdPorts is the other process of the test above.
func holdPorts(t *testing.T, n string) {
	count, err := strconv.Atoi(n)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(count)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		fmt.Printf("port %d\n", p)
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

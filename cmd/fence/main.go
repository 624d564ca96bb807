package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Exit statuses of fence itself.
const (
	exitUsage   = 2
	exitFailure = 125 // fence run could not do its job
	exitNoExec  = 126
	exitNoFound = 127
)

const usage = `Usage:
  fence run [--dir D] [--grace-period 10s] [--poll-interval 5s]
            [--renewal auto|holder|operator] [--margin 1s] -- CMD [ARG...]
      Run CMD only while this pod holds the lease. CMD gets FENCE_TOKEN and
      FENCE_LEASE; it is stopped (SIGTERM, then SIGKILL after the grace
      period) as soon as holdership is lost, and started again with the new
      token when this pod becomes the holder again. With --renewal holder
      (or auto, when the pod may read its Lease) fence run follows the Lease
      through the API server and, when the FencedLease has holder renewal,
      renews its grant itself, starts CMD only after its first renewal and
      stops it by its own deadline, whatever the files and the API server
      say: SIGTERM ahead of it, SIGKILL at it, whatever the grace period. When CMD exits, or fence run is told to stop, it releases the
      grant so that the next holder need not wait for it to expire.
  fence shards [--dir D] [--grace-period 10s] [--poll-interval 5s] -- CMD [ARG...]
      On a FencedShardSet's pod: run one CMD per shard this pod owns, with
      FENCE_SHARD (the shard's key) and FENCE_TOKEN (its fence). A CMD is
      stopped (SIGTERM, then SIGKILL after the grace period) as soon as its
      shard leaves the pod or its fence changes; a shard granted again
      starts a new CMD with the new fence. SIGTERM stops every CMD.
  fence token [--dir D]
      Print the fencing token. Exit 0 on the holder, 1 on a standby, 2 when
      the token files are absent or malformed.
  fence version
      Print the version.
  fence help
      Print this help.

The token directory is /etc/fencedlease, or $FENCE_DIR when set.
`

// usageError is a mistake on the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one invocation and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "fence: missing command\n\n", usage)
		return exitUsage
	}
	var code int
	var err error
	switch args[0] {
	case "run":
		code, err = runCommand(args[1:], stderr)
	case "token":
		code, err = tokenCommand(args[1:], stdout, stderr)
	case "shards":
		code, err = shardsCommand(args[1:], stderr)
	case "version":
		fmt.Fprintln(stdout, "fence", version)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
	default:
		err = &usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
	var uerr *usageError
	switch {
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "fence: %v\nRun 'fence help' for usage.\n", err)
		return exitUsage
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "fence: %v\n", err)
	}
	return code
}

// defaultDir is the token directory unless --dir is given.
func defaultDir() string {
	if d := os.Getenv("FENCE_DIR"); d != "" {
		return d
	}
	return fence.DefaultDir
}

// newFlags returns a flag set whose errors are reported as usage errors.
func newFlags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", defaultDir(), "directory of the token files (default from $FENCE_DIR)")
	return fs, dir
}

// parseFlags parses args and turns flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{fmt.Sprintf("%s: %v", fs.Name(), err)}
	}
	return nil
}

// positiveDuration rejects zero and negative durations.
func positiveDuration(name string, d time.Duration) error {
	if d <= 0 {
		return &usageError{fmt.Sprintf("--%s %v: must be positive", name, d)}
	}
	return nil
}
